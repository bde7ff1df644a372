package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// storeBytesDown is the writer's ebbfs_store_bytes_total{direction="down"}:
// the bytes its GETs have returned.
func (e *env) storeBytesDown() int64 {
	e.t.Helper()
	const prefix = `ebbfs_store_bytes_total{direction="down"} `
	for _, line := range strings.Split(string(e.adminGet("/metrics")), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				e.t.Fatalf("metrics line %q: %v", line, err)
			}
			return int64(f)
		}
	}
	return 0 // no GET yet
}

// extentSpan is a data range of an export as a client maps it.
type extentSpan struct{ off, len int64 }

// mapData merges the data runs of a client's map (off, len, isData) into
// spans.
func mapData(runs [][3]int64) []extentSpan {
	var out []extentSpan
	for _, r := range runs {
		if r[2] == 0 {
			continue
		}
		if k := len(out) - 1; k >= 0 && out[k].off+out[k].len == r[0] {
			out[k].len += r[1]
			continue
		}
		out = append(out, extentSpan{r[0], r[1]})
	}
	return out
}

// nbdinfoMapData runs nbdinfo --map and returns its data spans.
func (e *env) nbdinfoMapData(uri string) []extentSpan {
	e.t.Helper()
	r := e.run("nbdinfo", "--map", uri)
	if r.code != 0 {
		e.t.Fatalf("nbdinfo --map: %s", r)
	}
	var runs [][3]int64
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			e.t.Fatalf("nbdinfo --map line %q", line)
		}
		off, _ := strconv.ParseInt(f[0], 10, 64)
		n, _ := strconv.ParseInt(f[1], 10, 64)
		typ, _ := strconv.Atoi(f[2])
		data := int64(0)
		if typ&1 == 0 { // not NBD_STATE_HOLE
			data = 1
		}
		runs = append(runs, [3]int64{off, n, data})
	}
	return mapData(runs)
}

// qemuImgMapData runs qemu-img map --output=json and returns its data
// spans.
func (e *env) qemuImgMapData(uri string) []extentSpan {
	e.t.Helper()
	r := e.run("qemu-img", "map", "--output=json", "-f", "raw", uri)
	if r.code != 0 {
		e.t.Fatalf("qemu-img map: %s", r)
	}
	var ents []struct {
		Start, Length int64
		Data          bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &ents); err != nil {
		e.t.Fatalf("qemu-img map output: %v\n%s", err, r.stdout)
	}
	var runs [][3]int64
	for _, x := range ents {
		d := int64(0)
		if x.Data {
			d = 1
		}
		runs = append(runs, [3]int64{x.Start, x.Length, d})
	}
	return mapData(runs)
}

// TestNBDBlockStatusSparseCopy: a 10 GiB export holding 100 MiB of data in
// three ranges. nbdinfo --map and qemu-img map list exactly those ranges;
// nbdcopy and qemu-img convert, each run on a writer with an empty cache,
// read about 100 MiB from the store (not 10 GiB) and produce images
// qemu-img compare finds identical to the export.
func TestNBDBlockStatusSparseCopy(t *testing.T) {
	t.Parallel()
	need(t, "nbdinfo", "nbdcopy", "qemu-img", "truncate")
	e := newEnv(t)
	e.init()
	p := e.mount()
	const size = 10 << 30
	if r := e.run("truncate", "-s", strconv.Itoa(size), e.path(".nbd/disk0")); r.code != 0 {
		t.Fatalf("truncate: %s", r)
	}
	want := []extentSpan{{1 << 30, 40 << 20}, {5<<30 + 1<<20, 30 << 20}, {size - 30<<20, 30 << 20}}
	var dataBytes int64
	f, err := os.OpenFile(e.path(".nbd/disk0"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	written := map[int64][]byte{}
	for _, s := range want {
		b := randBytes(t, int(s.len))
		if _, err := f.WriteAt(b, s.off); err != nil {
			t.Fatal(err)
		}
		written[s.off] = b
		dataBytes += s.len
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	uri := "nbd://" + e.nbdAddr + "/disk0"

	// restart stops the writer and starts it on an empty cache directory:
	// every frame read after it comes from the store.
	restart := func() {
		t.Helper()
		p.stop()
		if err := os.RemoveAll(e.cache); err != nil {
			t.Fatal(err)
		}
		p = e.mount()
	}
	restart()
	before := e.storeBytesDown()
	if got := e.nbdinfoMapData(uri); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("nbdinfo --map data ranges: %v, want %v", got, want)
	}
	if got := e.qemuImgMapData(uri); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("qemu-img map data ranges: %v, want %v", got, want)
	}
	// The maps come from block status, not from the data. A client may
	// still read the first sectors (qemu's probe of the image), and on a
	// local store a read at offset 0 starts a stream whose sealed bytes
	// are read ahead: up to the data run there (1.7 MB in one CI run,
	// under 1 MiB in most). Reading the data would cost 100 MiB.
	if d := e.storeBytesDown() - before; d > 4<<20 {
		t.Errorf("mapping the export read %d bytes from the store", d)
	}

	for i, c := range [][]string{
		{"nbdcopy", uri, filepath.Join(e.dir, "nbdcopy.raw")},
		{"qemu-img", "convert", "-f", "raw", "-O", "raw", uri, filepath.Join(e.dir, "convert.raw")},
	} {
		if i > 0 {
			restart()
		}
		before := e.storeBytesDown()
		if r := e.run(c[0], c[1:]...); r.code != 0 {
			t.Fatalf("%s: %s", c[0], r)
		}
		got := e.storeBytesDown() - before
		t.Logf("%s of a %d GiB export holding %d MiB of data read %.1f MiB from the store",
			c[0], size>>30, dataBytes>>20, float64(got)/(1<<20))
		if got < dataBytes*9/10 || got > dataBytes*3/2 {
			t.Errorf("%s read %d bytes from the store; the export holds %d bytes of data in %d", c[0], got, dataBytes, size)
		}
		out := c[len(c)-1]
		if r := e.run("qemu-img", "compare", "-f", "raw", "-F", "raw", out, uri); r.code != 0 || !strings.Contains(r.stdout, "identical") {
			t.Errorf("qemu-img compare %s: %s", out, r)
		}
		img, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		for off, b := range written {
			got := make([]byte, len(b))
			if _, err := img.ReadAt(got, off); err != nil || !bytes.Equal(got, b) {
				t.Errorf("%s: the range at %d differs from what was written (%v)", out, off, err)
			}
		}
		img.Close()
	}
}
