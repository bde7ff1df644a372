package nbd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/testutil"
)

// These tests serve an ebbfs engine over TCP and a unix socket and drive
// it with real NBD clients (libnbd's nbdinfo and nbdcopy, qemu-io,
// qemu-img). A missing tool skips its test unless CI=true.

// engineServer is an NBD server over an engine backend.
type engineServer struct {
	addr string // host:port
	sock string // unix socket path
}

func (s engineServer) url(export string) string { return "nbd://" + s.addr + "/" + export }
func (s engineServer) unixURL(export string) string {
	return "nbd+unix:///" + export + "?socket=" + s.sock
}

func startEngineServer(t testing.TB, f *engFS) engineServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Unix socket paths are short: not under t.TempDir().
	dir, err := os.MkdirTemp("", "ebbfs-nbd")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		l.Close()
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	s := NewServer(f.b, Options{Logger: testLogger(t)})
	done := make(chan error, 2)
	go func() { done <- s.Serve(l) }()
	go func() { done <- s.Serve(ul) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
		os.RemoveAll(dir)
	})
	return engineServer{addr: l.Addr().String(), sock: sock}
}

// tool runs an external client and fails the test on a non-zero exit.
func tool(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := toolErr(t, name, args...)
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return out
}

// toolErr runs an external client and returns its output and exit error.
func toolErr(t testing.TB, name string, args ...string) (string, error) {
	t.Helper()
	path := needTool(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	return string(out), err
}

// writeRandomFile writes n pseudo-random bytes (from seed) to path.
func writeRandomFile(t testing.TB, path string, n int64, seed uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	r := mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := io.CopyN(w, r, n); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// sameAsFile compares ino of engine e with the file at path, 4 MiB at a
// time, and reports the first difference.
func sameAsFile(t testing.TB, e *fs.Engine, ino uint64, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	a, err := e.GetAttr(context.Background(), ino)
	if err != nil {
		t.Fatal(err)
	}
	if int64(a.Size) != st.Size() {
		t.Fatalf("size %d, file %s has %d", a.Size, path, st.Size())
	}
	want := make([]byte, 4<<20)
	got := make([]byte, 4<<20)
	for off := int64(0); off < st.Size(); off += int64(len(want)) {
		n, err := io.ReadFull(f, want)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatal(err)
		}
		k, err := e.Read(context.Background(), ino, got[:n], off)
		if err != nil || k != n {
			t.Fatalf("engine read at %d: %d bytes, %v", off, k, err)
		}
		if !bytes.Equal(got[:n], want[:n]) {
			t.Fatalf("at %d: %s", off, diffAt(got[:n], want[:n]))
		}
	}
}

func TestEngineNbdinfoList(t *testing.T) {
	needTool(t, "nbdinfo")
	f := newEngFS(t, fs.Options{})
	f.mkExport("disk0", 256<<20)
	f.mkExport("disk1", 3*ext+17)
	f.mkExport("empty", 0)
	dir, _ := f.e.Lookup(context.Background(), fs.RootIno, ExportDir)
	if _, err := f.e.Mkdir(context.Background(), dir.Ino, "notadisk", 0o700, 0, 0); err != nil {
		t.Fatal(err)
	}
	s := startEngineServer(t, f)
	type export struct {
		Name string `json:"export-name"`
		Size int64  `json:"export-size"`
	}
	want := fmt.Sprint([]export{{"disk0", 256 << 20}, {"disk1", 3*ext + 17}, {"empty", 0}})
	for _, url := range []string{"nbd://" + s.addr, "nbd+unix:///?socket=" + s.sock} {
		out := tool(t, "nbdinfo", "--list", "--json", url)
		var v struct {
			Exports []export `json:"exports"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("nbdinfo output: %v\n%s", err, out)
		}
		if got := fmt.Sprint(v.Exports); got != want {
			t.Fatalf("%s: exports %s, want %s\n%s", url, got, want, out)
		}
	}
	// One export's details, and a resize seen by the next connection.
	f.resize(f.mustLookupExport("disk1"), 5<<20)
	out := tool(t, "nbdinfo", "--json", s.url("disk1"))
	var v struct {
		Exports []map[string]any `json:"exports"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Exports) != 1 {
		t.Fatalf("nbdinfo output: %v\n%s", err, out)
	}
	e := v.Exports[0]
	if e["export-size"] != float64(5<<20) || e["can_multi_conn"] != true || e["can_trim"] != true ||
		e["can_zero"] != true || e["can_flush"] != true || e["is_read_only"] != false {
		t.Fatalf("disk1 after resize:\n%s", out)
	}
	if out, err := toolErr(t, "nbdinfo", s.url("notadisk")); err == nil {
		t.Fatalf("nbdinfo opened a directory as an export:\n%s", out)
	}
}

// TestEngineNbdcopy copies 256 MiB of random data into an export over four
// connections, checks that a replica opened from the store alone holds it
// (the FLUSH made it durable), and copies it back out.
func TestEngineNbdcopy(t *testing.T) {
	needTool(t, "nbdcopy")
	if testing.Short() {
		t.Skip("256 MiB copy in -short mode")
	}
	const size = 256 << 20
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	writeRandomFile(t, src, size, 1)
	f := newEngFS(t, fs.Options{SegmentTarget: 32 << 20})
	ino := f.mkExport("disk0", size)
	s := startEngineServer(t, f)

	start := time.Now()
	tool(t, "nbdcopy", "--connections=4", "--flush", src, s.url("disk0"))
	t.Logf("nbdcopy in: %v (%.0f MiB/s)", time.Since(start), size/(1<<20)/time.Since(start).Seconds())
	if n := f.size(ino); n != size {
		t.Fatalf("export size %d after the copy, want %d", n, size)
	}
	sameAsFile(t, f.replica(), ino, src)

	start = time.Now()
	tool(t, "nbdcopy", "--connections=4", s.url("disk0"), dst)
	t.Logf("nbdcopy out: %v (%.0f MiB/s)", time.Since(start), size/(1<<20)/time.Since(start).Seconds())
	a, b := mustRead(t, src), mustRead(t, dst)
	if !bytes.Equal(a, b) {
		t.Fatalf("round trip: %s", diffAt(b, a))
	}
	f.fsck()
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEngineQemuIO runs qemu-io over TCP and the unix socket and checks
// the result through the engine and a replica.
func TestEngineQemuIO(t *testing.T) {
	needTool(t, "qemu-io")
	f := newEngFS(t, fs.Options{})
	const size = 1 << 20
	ino := f.mkExport("disk0", size)
	s := startEngineServer(t, f)
	qemuIO(t, s.url("disk0"),
		"write -P 0xab 0 128k",
		"read -P 0xab 0 128k",
		"discard 0 4k", // part of extent 0
		"read -P 0 0 4k",
		"write -z 8k 4k", // NO_HOLE, part of extent 0
		"read -P 0 8k 4k",
		"read -P 0xab 4k 4k",
		"discard 32k 32k", // all of extent 1
		"read -P 0 32k 32k",
		"write -z -u 64k 32k", // may unmap: all of extent 2
		"read -P 0 64k 32k",
		"read -P 0xab 96k 32k",
		"flush",
	)
	// A second client on the unix socket sees the same bytes.
	qemuIO(t, s.unixURL("disk0"),
		"read -P 0 0 4k", "read -P 0xab 4k 4k", "read -P 0 8k 4k", "read -P 0xab 12k 20k",
		"read -P 0 32k 64k", "read -P 0xab 96k 32k", "read -P 0 128k 896k")

	want := bytes.Repeat([]byte{0xab}, 128<<10)
	clear(want[0 : 4<<10])
	clear(want[8<<10 : 12<<10])
	clear(want[32<<10 : 96<<10])
	want = append(want, make([]byte, size-len(want))...)
	// The flush made it durable: a replica from the store alone has it.
	r := f.replica()
	if got := readEngine(t, r, ino, 0, size); !bytes.Equal(got, want) {
		t.Fatalf("replica after qemu-io flush: %s", diffAt(got, want))
	}
	// The whole extents discarded and zeroed are holes; the partly
	// zeroed one still holds data.
	for idx, has := range []bool{true, false, false, true, false} {
		if f.hasData(ino, int64(idx)) != has {
			t.Errorf("extent %d: has data %v, want %v", idx, !has, has)
		}
	}
	f.fsck()
}

// TestEngineQemuImgCompare compares an export with a local raw file.
func TestEngineQemuImgCompare(t *testing.T) {
	needTool(t, "qemu-img")
	ctx := context.Background()
	f := newEngFS(t, fs.Options{})
	const size = 8 << 20
	local := filepath.Join(t.TempDir(), "local.raw")
	writeRandomFile(t, local, size, 2)
	data := mustRead(t, local)
	clear(data[1<<20 : 3<<20]) // a zero region: a hole in the export
	if err := os.WriteFile(local, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ino := f.mkExport("disk0", size)
	s := startEngineServer(t, f)

	// Fill the export through NBD (qemu-img convert, zero detection on).
	tool(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", local, s.url("disk0"))
	if got := readEngine(t, f.e, ino, 0, size); !bytes.Equal(got, data) {
		t.Fatalf("after qemu-img convert: %s", diffAt(got, data))
	}
	out := tool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", local, s.url("disk0"))
	if !strings.Contains(out, "Images are identical") {
		t.Fatalf("qemu-img compare:\n%s", out)
	}
	// One byte changed through the filesystem: compare must see it.
	if _, err := f.e.Write(ctx, ino, []byte{^data[5<<20+3]}, 5<<20+3); err != nil {
		t.Fatal(err)
	}
	out, err := toolErr(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", local, s.url("disk0"))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "mismatch") {
		t.Fatalf("qemu-img compare after a change: %v\n%s", err, out)
	}
	// qemu-img names the start of the sector that differs.
	if !strings.Contains(out, "offset "+strconv.Itoa(5<<20)+"!") {
		t.Errorf("qemu-img compare names the wrong offset:\n%s", out)
	}
}

// TestEngineMultiConnDurable: a write completed on one connection and
// FLUSHed on another is durable: a replica opened from the store alone on
// a fresh cache directory reads it. So are WRITE+FUA, TRIM and
// WRITE_ZEROES. The engine runs no periodic barrier, so only the client's
// FLUSH or FUA can have made anything durable.
func TestEngineMultiConnDurable(t *testing.T) {
	f := newEngFS(t, fs.Options{})
	const size = 1 << 20
	ino := f.mkExport("disk0", size)
	s := startEngineServer(t, f)
	c1, r1 := connect(t, s.addr, "disk0")
	c2, _ := connect(t, s.addr, "disk0")
	if r1.tflags&tflagCanMultiConn == 0 || r1.size != size {
		t.Fatalf("handshake: flags %#x size %d", r1.tflags, r1.size)
	}
	want := make([]byte, size)
	write := func(c *testClient, flags uint16, off int, data []byte) {
		t.Helper()
		if errno, _ := c.cmd(cmdWrite, flags, uint64(off), uint32(len(data)), data); errno != 0 {
			t.Fatalf("WRITE %d+%d: %s", off, len(data), errnoName(errno))
		}
		copy(want[off:], data)
	}
	replicaHas := func(when string) {
		t.Helper()
		if got := readEngine(t, f.replica(), ino, 0, size); !bytes.Equal(got, want) {
			t.Fatalf("replica %s: %s", when, diffAt(got, want))
		}
	}

	write(c1, 0, 0, testutil.RandBytes(1, 100<<10))
	write(c1, 0, 300<<10+7, testutil.RandBytes(2, 5000))
	if errno, _ := c2.cmd(cmdFlush, 0, 0, 0, nil); errno != 0 {
		t.Fatalf("FLUSH: %s", errnoName(errno))
	}
	replicaHas("after a FLUSH on the other connection")

	write(c2, cmdFlagFUA, 600<<10, testutil.RandBytes(3, 64<<10))
	replicaHas("after WRITE+FUA")

	for _, z := range []struct {
		typ, flags uint16
		off, n     int
	}{{cmdTrim, 0, 1000, 40000}, {cmdWriteZeroes, 0, 64 << 10, 32 << 10}, {cmdWriteZeroes, cmdFlagNoHole, 300 << 10, 4000}} {
		if errno, _ := c1.cmd(z.typ, z.flags, uint64(z.off), uint32(z.n), nil); errno != 0 {
			t.Fatalf("%s %d+%d: %s", cmdName(z.typ), z.off, z.n, errnoName(errno))
		}
		clear(want[z.off : z.off+z.n])
	}
	if errno, data := c2.cmd(cmdRead, 0, 0, size, nil); errno != 0 || !bytes.Equal(data, want) {
		t.Fatalf("READ on the other connection: %s, %s", errnoName(errno), diffAt(data, want))
	}
	if errno, _ := c2.cmd(cmdFlush, 0, 0, 0, nil); errno != 0 {
		t.Fatalf("FLUSH: %s", errnoName(errno))
	}
	replicaHas("after TRIM, WRITE_ZEROES and a FLUSH")

	// Out of range: the server refuses, the file does not grow.
	if errno, _ := c1.cmd(cmdWrite, 0, size-2, 4, []byte("abcd")); errno != errnoNoSpc {
		t.Fatalf("WRITE past the end: %s", errnoName(errno))
	}
	if errno, _ := c1.cmd(cmdTrim, 0, size, 1, nil); errno != errnoInval {
		t.Fatalf("TRIM past the end: %s", errnoName(errno))
	}
	// Shrunk through the filesystem while connected: the tail is gone
	// for the connection too.
	f.resize(ino, size/2)
	if errno, _ := c1.cmd(cmdRead, 0, size/2, 10, nil); errno != errnoInval {
		t.Fatalf("READ past the shrunk end: %s", errnoName(errno))
	}
	if errno, _ := c1.cmd(cmdWrite, 0, size-10, 1, []byte{1}); errno != errnoNoSpc {
		t.Fatalf("WRITE past the shrunk end: %s", errnoName(errno))
	}
	if n := f.size(ino); n != size/2 {
		t.Fatalf("size %d, want %d", n, size/2)
	}
	f.fsck()
}

var benchRunRE = regexp.MustCompile(`Run completed in ([0-9.]+) seconds`)

// How a benchmark's client talks to the server.
const (
	plain    = "plain"
	withCert = "x509" // TLS with certificates
	withPSK  = "psk"  // TLS with a pre-shared key
)

// BenchmarkNBDWrite copies 1 GiB of random data into an export with
// nbdcopy (4 connections, ending with a FLUSH).
func BenchmarkNBDWrite(b *testing.B) {
	benchNbdcopy(b, true, plain)
}

// BenchmarkNBDRead copies a 1 GiB export to null: with nbdcopy.
func BenchmarkNBDRead(b *testing.B) {
	benchNbdcopy(b, false, plain)
}

// BenchmarkNBDWriteTLS is BenchmarkNBDWrite over TLS (X.509).
func BenchmarkNBDWriteTLS(b *testing.B) {
	benchNbdcopy(b, true, withCert)
}

// BenchmarkNBDReadTLS is BenchmarkNBDRead over TLS (X.509).
func BenchmarkNBDReadTLS(b *testing.B) {
	benchNbdcopy(b, false, withCert)
}

// BenchmarkNBDWritePSK is BenchmarkNBDWrite over TLS-PSK.
func BenchmarkNBDWritePSK(b *testing.B) {
	benchNbdcopy(b, true, withPSK)
}

// BenchmarkNBDReadPSK is BenchmarkNBDRead over TLS-PSK.
func BenchmarkNBDReadPSK(b *testing.B) {
	benchNbdcopy(b, false, withPSK)
}

// benchServer serves f in plain text, over TLS or over TLS-PSK and
// returns the libnbd URI of export and the qemu arguments that open it as
// a raw image.
func benchServer(b *testing.B, f *engFS, export, mode string) (string, []string) {
	switch mode {
	case withCert:
		p := newPKI(b, "bench")
		addr := startEngineTLSServer(b, f, p, false)
		return tlsURI(addr, export, p.Dir), qemuTLS(b, addr, export, p.Dir)
	case withPSK:
		needPSK(b)
		dir, file := pskDir(b, "bench", randomKey(b))
		addr := startPSKServer(b, f.b, file)
		return pskURI(addr, export, file, "bench"), qemuPSK(b, addr, export, dir, "bench")
	}
	s := startEngineServer(b, f)
	return s.url(export), []string{"-f", "raw", s.url(export)}
}

func benchNbdcopy(b *testing.B, write bool, mode string) {
	needTool(b, "nbdcopy")
	const size = 1 << 30
	src := filepath.Join(b.TempDir(), "src")
	writeRandomFile(b, src, size, 3)
	f := newEngFS(b, fs.Options{SegmentTarget: 32 << 20})
	f.mkExport("disk0", size)
	uri, _ := benchServer(b, f, "disk0", mode)
	if !write {
		tool(b, "nbdcopy", "--connections=4", "--flush", src, uri)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		if write {
			tool(b, "nbdcopy", "--connections=4", "--flush", src, uri)
		} else {
			tool(b, "nbdcopy", "--connections=4", uri, "null:")
		}
	}
}

// BenchmarkQemuImgBench4K runs qemu-img bench with 4 KiB writes (depth 16,
// a FLUSH every 1,000 requests), sequential and with a stride of 1 MiB +
// 4 KiB so that each write lands in a different extent, and reports IOPS.
func BenchmarkQemuImgBench4K(b *testing.B) {
	benchQemuImg4K(b, plain)
}

// BenchmarkFio4K runs fio's nbd engine (libnbd, one connection) with 4
// KiB random writes, then random reads, over 1 GiB of a 4 GiB export
// (depth 16) and reports IOPS, in plain text and over TLS (X.509). fio
// refuses key files named in the URI, so the client finds the CA where
// libnbd looks by default ($HOME/.pki/libnbd); it has no such default for
// TLS-PSK keys, and qemu-img bench takes no TLS credentials here, so
// TLS-PSK has sequential figures only (BenchmarkNBDReadPSK and WritePSK).
func BenchmarkFio4K(b *testing.B) {
	for _, mode := range []string{plain, withCert} {
		b.Run("tls="+mode, func(b *testing.B) { benchFio4K(b, mode) })
	}
}

func benchFio4K(b *testing.B, mode string) {
	needTool(b, "fio")
	f := newEngFS(b, fs.Options{SegmentTarget: 32 << 20})
	f.mkExport("disk0", 4<<30)
	uri, _ := benchServer(b, f, "disk0", mode)
	home := b.TempDir()
	if dir, ok := strings.CutPrefix(uri[strings.Index(uri, "?")+1:], "tls-certificates="); ok && mode == withCert {
		if err := os.MkdirAll(filepath.Join(home, ".pki"), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.Symlink(dir, filepath.Join(home, ".pki", "libnbd")); err != nil {
			b.Fatal(err)
		}
		uri = uri[:strings.Index(uri, "?")]
	}
	b.ResetTimer()
	for _, rw := range []string{"randwrite", "randread"} {
		var iops float64
		for range b.N {
			cmd := exec.Command("fio", "--name=bench", "--ioengine=nbd", "--uri="+uri, "--rw="+rw, "--bs=4k",
				"--iodepth=16", "--size=1g", "--io_size=64m", "--randseed=1", "--output-format=json")
			cmd.Env = append(os.Environ(), "HOME="+home)
			out, err := cmd.CombinedOutput()
			var r struct {
				Jobs []struct {
					Read, Write struct {
						IOPS float64 `json:"iops"`
					}
				}
			}
			if i := bytes.IndexByte(out, '{'); err != nil || i < 0 || json.Unmarshal(out[i:], &r) != nil || len(r.Jobs) != 1 {
				b.Fatalf("fio %s: %v\n%s", uri, err, out)
			}
			iops += r.Jobs[0].Read.IOPS + r.Jobs[0].Write.IOPS
		}
		b.ReportMetric(iops/float64(b.N), rw+"-IOPS")
	}
}

func benchQemuImg4K(b *testing.B, mode string) {
	needTool(b, "qemu-img")
	for _, step := range []int{4096, 1<<20 + 4096} {
		b.Run(fmt.Sprintf("step=%d", step), func(b *testing.B) {
			const size, count = 4 << 30, 20000
			f := newEngFS(b, fs.Options{SegmentTarget: 32 << 20})
			f.mkExport("disk0", size)
			_, target := benchServer(b, f, "disk0", mode)
			b.ResetTimer()
			var secs float64
			for range b.N {
				args := append([]string{"bench", "-w", "-t", "none", "-s", "4096", "-S", strconv.Itoa(step),
					"-c", strconv.Itoa(count), "-d", "16", "--flush-interval=1000"}, target...)
				out := tool(b, "qemu-img", args...)
				m := benchRunRE.FindStringSubmatch(out)
				if m == nil {
					b.Fatalf("qemu-img bench output:\n%s", out)
				}
				v, _ := strconv.ParseFloat(m[1], 64)
				secs += v
			}
			b.ReportMetric(float64(count*b.N)/secs, "IOPS")
		})
	}
}

// rawCmd sends one request and reads its reply without touching t, so it
// can run on any goroutine.
func rawCmd(c *testClient, handle uint64, typ, flags uint16, off uint64, length uint32, payload []byte) (uint32, []byte, error) {
	if err := c.send(typ, flags, handle, off, length, payload); err != nil {
		return 0, nil, err
	}
	got, errno, data, err := c.readReply(func(uint64) int {
		if typ == cmdRead {
			return int(length)
		}
		return 0
	})
	if err == nil && got != handle {
		err = fmt.Errorf("reply handle %d, want %d", got, handle)
	}
	return errno, data, err
}

// TestEngineConcurrentConnections runs random WRITE, TRIM and WRITE_ZEROES
// (with and without NO_HOLE) on four connections at once, each in its own
// byte range. The ranges are not extent-aligned, so neighbours share
// extents and edit different bytes of them concurrently. The result must
// match a model, through the server and through a replica after a FLUSH.
func TestEngineConcurrentConnections(t *testing.T) {
	const conns, region, ops = 4, 1<<20 + 1000, 150
	const size = conns * region
	f := newEngFS(t, fs.Options{})
	ino := f.mkExport("disk0", size)
	s := startEngineServer(t, f)
	want := make([]byte, size)
	clients := make([]*testClient, conns)
	for i := range clients {
		clients[i], _ = connect(t, s.addr, "disk0")
		clients[i].nc.SetDeadline(time.Now().Add(2 * time.Minute))
	}
	errs := make(chan error, conns)
	for i, c := range clients {
		go func() {
			rng := mrand.New(mrand.NewPCG(uint64(i), 42))
			base := i * region
			model := want[base : base+region] // only this goroutine touches it
			for k := range ops {
				off := rng.IntN(region)
				n := 1 + rng.IntN(min(region-off, 3*ext))
				var typ, flags uint16
				var payload []byte
				switch op := rng.IntN(4); op {
				case 0:
					typ, payload = cmdWrite, make([]byte, n)
					for j := range payload {
						payload[j] = byte(rng.Uint32()) | 1 // never zero
					}
				case 1:
					typ = cmdTrim
				default:
					typ = cmdWriteZeroes
					if op == 3 {
						flags = cmdFlagNoHole
					}
				}
				errno, _, err := rawCmd(c, uint64(k+1), typ, flags, uint64(base+off), uint32(n), payload)
				if err == nil && errno != 0 {
					err = fmt.Errorf("%s: %s", cmdName(typ), errnoName(errno))
				}
				if err != nil {
					errs <- fmt.Errorf("connection %d op %d: %w", i, k, err)
					return
				}
				if payload != nil {
					copy(model[off:], payload)
				} else {
					clear(model[off : off+n])
				}
			}
			errs <- nil
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range clients {
		errno, data, err := rawCmd(c, 1000, cmdRead, 0, uint64(i*region), region, nil)
		if err != nil || errno != 0 || !bytes.Equal(data, want[i*region:(i+1)*region]) {
			t.Fatalf("READ of region %d: %v %s %s", i, err, errnoName(errno), diffAt(data, want[i*region:(i+1)*region]))
		}
	}
	if errno, _, err := rawCmd(clients[0], 1001, cmdFlush, 0, 0, 0, nil); err != nil || errno != 0 {
		t.Fatalf("FLUSH: %v %s", err, errnoName(errno))
	}
	if got := readEngine(t, f.replica(), ino, 0, size); !bytes.Equal(got, want) {
		t.Fatalf("replica: %s", diffAt(got, want))
	}
	// Extents that read as zeroes hold no data after the FLUSH.
	for idx := int64(0); idx*ext < size; idx++ {
		zero := isZero(want[idx*ext : min(size, (idx+1)*ext)])
		if has := f.hasData(ino, idx); has == zero {
			t.Errorf("extent %d: has data %v, reads as zeroes %v", idx, has, zero)
		}
	}
	f.fsck()
}
