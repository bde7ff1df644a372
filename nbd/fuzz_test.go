package nbd

import (
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

const fuzzExportSize = 64 << 10

// fuzzServe feeds input to one server connection over net.Pipe and checks
// that the server neither hangs nor leaks the export nor passes a bad range
// to the backend.
func fuzzServe(t *testing.T, input []byte) *memBackend {
	b := newMemBackend(map[string]int64{"disk": fuzzExportSize, "small": 4096})
	s := NewServer(b, Options{
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxRequest: 4096,
	})
	p, cli := net.Pipe()
	srv := &eofConn{Conn: p}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serveConn(srv)
	}()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		io.Copy(io.Discard, cli) // replies, until the server closes
	}()
	cli.SetWriteDeadline(time.Now().Add(10 * time.Second))
	cli.Write(input) // returns once the server has read it all, or closed
	srv.setEOF()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("server connection did not finish")
	}
	<-drained
	cli.Close()
	s.Close()
	if o, c := b.opens.Load(), b.closes.Load(); o != c {
		t.Fatalf("exports opened %d, closed %d", o, c)
	}
	for _, name := range []string{"disk", "small"} {
		if b.export(name).badRange.Load() {
			t.Fatalf("backend saw an out-of-range operation on %q", name)
		}
	}
	return b
}

// TestFuzzHarness checks that the harness reaches the transmission phase,
// so FuzzRequests explores commands rather than the handshake.
func TestFuzzHarness(t *testing.T) {
	p := []byte("pattern!")
	b := fuzzServe(t, cat(goPrefix, reqBytes(cmdWrite, 0, 1, 100, uint32(len(p)), p), reqBytes(cmdFlush, 0, 2, 0, 0, nil)))
	if got := b.export("disk").bytes(100, int64(len(p))); string(got) != string(p) {
		t.Fatalf("write through the fuzz harness: %q", got)
	}
	if b.flushes.Load() != 1 {
		t.Fatalf("flushes %d", b.flushes.Load())
	}
}

// eofConn is the server end of a net.Pipe whose reads end with io.EOF once
// the client has written everything (net.Pipe has no half-close).
type eofConn struct {
	net.Conn
	eof atomic.Bool
}

func (c *eofConn) setEOF() {
	c.eof.Store(true)
	c.Conn.SetReadDeadline(time.Unix(1, 0))
}

func (c *eofConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.eof.Load() {
		return n, io.EOF
	}
	return n, err
}

func (c *eofConn) SetReadDeadline(t time.Time) error {
	err := c.Conn.SetReadDeadline(t)
	if c.eof.Load() {
		c.Conn.SetReadDeadline(time.Unix(1, 0))
	}
	return err
}

func (c *eofConn) SetDeadline(t time.Time) error {
	c.Conn.SetWriteDeadline(t)
	return c.SetReadDeadline(t)
}

func u32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// goPrefix is a client stream up to a successful NBD_OPT_GO for "disk".
var goPrefix = cat(u32(clientFlagFixedNewstyle|clientFlagNoZeroes), optBytes(optGo, goData("disk", infoBlockSize)))

func FuzzHandshake(f *testing.F) {
	flags := u32(clientFlagFixedNewstyle | clientFlagNoZeroes)
	f.Add(goPrefix)
	f.Add(cat(flags, optBytes(optExportName, []byte("disk")), reqBytes(cmdRead, 0, 1, 0, 512, nil)))
	f.Add(cat(u32(clientFlagFixedNewstyle), optBytes(optExportName, []byte("small"))))
	f.Add(cat(flags, optBytes(optList, nil), optBytes(optInfo, goData("small", infoName, infoDescription)), optBytes(optAbort, nil)))
	f.Add(cat(flags, optBytes(optGo, goData("", infoName)), optBytes(optGo, goData("nope"))))
	f.Add(cat(flags, optBytes(optStructuredReply, nil), optBytes(optStartTLS, nil), optBytes(99, []byte("xyz"))))
	f.Add(cat(flags, optBytes(optInfo, []byte{0xff, 0xff, 0xff, 0xff, 0, 1})))
	f.Add(cat(flags, optBytes(optGo, goData("disk"))[:16], u32(0x7fffffff)))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, input []byte) {
		fuzzServe(t, input)
	})
}

func FuzzRequests(f *testing.F) {
	w := make([]byte, 512)
	for i := range w {
		w[i] = byte(i)
	}
	f.Add(reqBytes(cmdRead, 0, 1, 0, 4096, nil))
	f.Add(cat(reqBytes(cmdWrite, cmdFlagFUA, 2, 512, 512, w), reqBytes(cmdRead, 0, 3, 0, 1024, nil)))
	f.Add(cat(reqBytes(cmdFlush, 0, 4, 0, 0, nil), reqBytes(cmdTrim, 0, 5, 0, 8192, nil), reqBytes(cmdDisc, 0, 6, 0, 0, nil)))
	f.Add(reqBytes(cmdWriteZeroes, cmdFlagNoHole|cmdFlagFUA, 7, fuzzExportSize-100, 100, nil))
	f.Add(reqBytes(cmdWriteZeroes, 0, 8, fuzzExportSize-100, 101, nil))
	f.Add(reqBytes(cmdRead, 0, 9, 0xffffffffffffff00, 0x1000, nil))
	f.Add(reqBytes(cmdWrite, 0, 10, 0, 0xffffffff, nil))
	f.Add(reqBytes(cmdWrite, 0, 11, fuzzExportSize-4, 8, w[:8]))
	f.Add(reqBytes(42, 0xffff, 12, 0, 0, nil))
	f.Add(reqBytes(cmdWrite, 0, 13, 0, 512, w[:100]))
	f.Fuzz(func(t *testing.T, input []byte) {
		fuzzServe(t, cat(goPrefix, input))
	})
}
