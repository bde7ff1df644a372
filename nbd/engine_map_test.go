package nbd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"ebbfs.dev/ebbfs/fs"
)

// span is a run of an export as a client maps it.
type span struct {
	Off, Len int64
	Data     bool
}

// addSpan appends s to l, merging it into the last span of the same kind.
func addSpan(l []span, s span) []span {
	if k := len(l) - 1; k >= 0 && l[k].Data == s.Data && l[k].Off+l[k].Len == s.Off {
		l[k].Len += s.Len
		return l
	}
	return append(l, s)
}

// dataSpans keeps the data spans of l.
func dataSpans(l []span) []span {
	var out []span
	for _, s := range l {
		if s.Data {
			out = append(out, s)
		}
	}
	return out
}

// nbdinfoMap runs nbdinfo --map on uri (lines "offset length type
// description") and returns the merged spans.
func nbdinfoMap(t testing.TB, uri string) []span {
	t.Helper()
	out := tool(t, "nbdinfo", "--map", uri)
	var l []span
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			t.Fatalf("nbdinfo --map line %q", line)
		}
		off, err1 := strconv.ParseInt(f[0], 10, 64)
		n, err2 := strconv.ParseInt(f[1], 10, 64)
		typ, err3 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("nbdinfo --map line %q", line)
		}
		l = addSpan(l, span{off, n, typ&int(stateHole) == 0})
	}
	return l
}

// qemuImgMap runs qemu-img map --output=json and returns the merged spans.
func qemuImgMap(t testing.TB, args ...string) []span {
	t.Helper()
	out := tool(t, "qemu-img", append([]string{"map", "--output=json"}, args...)...)
	var ents []struct {
		Start, Length int64
		Data          bool
	}
	if err := json.Unmarshal([]byte(out), &ents); err != nil {
		t.Fatalf("qemu-img map output: %v\n%s", err, out)
	}
	var l []span
	for _, e := range ents {
		l = addSpan(l, span{e.Start, e.Length, e.Data})
	}
	return l
}

// countingBackend counts the bytes its exports read.
type countingBackend struct {
	Backend
	read *atomic.Int64
}

type countingExport struct {
	Export
	read *atomic.Int64
}

func (b countingBackend) Open(ctx context.Context, name string) (Export, error) {
	x, err := b.Backend.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return countingExport{x, b.read}, nil
}

func (x countingExport) ReadAt(ctx context.Context, p []byte, off int64) error {
	x.read.Add(int64(len(p)))
	return x.Export.ReadAt(ctx, p, off)
}

// TestEngineClientsMapAndSparseCopy: nbdinfo --map and qemu-img map list
// exactly the data of a sparse export (committed and dirty), and nbdcopy
// and qemu-img convert copy it reading only the data, into images
// qemu-img compare finds identical.
func TestEngineClientsMapAndSparseCopy(t *testing.T) {
	needTool(t, "nbdinfo")
	needTool(t, "qemu-img")
	needTool(t, "nbdcopy")
	f := newEngFS(t, fs.Options{})
	const size = 256 << 20
	ino := f.mkExport("disk0", size)
	want := []span{{16 << 20, 1 << 20, true}, {100<<20 + 2*ext, 2 << 20, true}, {size - 512<<10, 512 << 10, true}}
	var dataBytes int64
	for i, s := range want {
		p := make([]byte, s.Len)
		for j := range p {
			p[j] = byte(j*7+i) | 1 // never zero
		}
		if _, err := f.e.Write(context.Background(), ino, p, s.Off); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			f.barrier() // the last range stays dirty
		}
		dataBytes += s.Len
	}
	var read atomic.Int64
	f.b = countingBackend{f.b, &read}
	s := startEngineServer(t, f)
	uri := s.url("disk0")

	if got := dataSpans(nbdinfoMap(t, uri)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("nbdinfo --map data: %v, want %v", got, want)
	}
	if got := dataSpans(qemuImgMap(t, "-f", "raw", uri)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("qemu-img map data: %v, want %v", got, want)
	}
	if n := read.Load(); n != 0 {
		t.Errorf("mapping read %d bytes of data", n)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"nbdcopy", []string{"nbdcopy", uri, filepath.Join(dir, "nbdcopy.raw")}},
		{"qemu-img convert", []string{"qemu-img", "convert", "-f", "raw", "-O", "raw", uri, filepath.Join(dir, "qemu-img convert.raw")}},
	} {
		read.Store(0)
		tool(t, c.args[0], c.args[1:]...)
		n := read.Load()
		out := filepath.Join(dir, c.name+".raw")
		t.Logf("%s read %d bytes of a %d-byte export holding %d bytes of data", c.name, n, size, dataBytes)
		if n < dataBytes || n > dataBytes+dataBytes/2 {
			t.Errorf("%s read %d bytes; the export holds %d bytes of data in %d", c.name, n, dataBytes, size)
		}
		sameAsFile(t, f.e, ino, out)
		if o := tool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", out, uri); !strings.Contains(o, "identical") {
			t.Errorf("qemu-img compare %s: %s", c.name, o)
		}
		if st, err := os.Stat(out); err == nil {
			t.Logf("%s: %d bytes, %d allocated", c.name, st.Size(), allocated(st))
		}
	}
	if !bytes.Equal(readEngine(t, f.e, ino, 16<<20, 4), []byte{1, 7 | 1, 14 | 1, 21 | 1}) {
		t.Error("export content changed")
	}
}

// allocated is the space a file takes on disk.
func allocated(st os.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Blocks * 512
	}
	return -1
}
