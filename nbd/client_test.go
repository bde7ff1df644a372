package nbd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// testClient is a minimal NBD client speaking the raw protocol.
type testClient struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dialClient(t testing.TB, addr string) *testClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	return &testClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *testClient) write(b []byte) error {
	_, err := c.nc.Write(b)
	return err
}

func (c *testClient) readN(n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(c.br, b)
	return b, err
}

// hello reads the server greeting and returns the handshake flags.
func (c *testClient) hello() uint16 {
	c.t.Helper()
	b, err := c.readN(18)
	if err != nil {
		c.t.Fatalf("reading greeting: %v", err)
	}
	if m := binary.BigEndian.Uint64(b); m != nbdMagic {
		c.t.Fatalf("magic %#x", m)
	}
	if m := binary.BigEndian.Uint64(b[8:]); m != ihaveOpt {
		c.t.Fatalf("newstyle magic %#x", m)
	}
	return binary.BigEndian.Uint16(b[16:])
}

// start reads the greeting and sends client flags.
func (c *testClient) start(flags uint32) {
	c.t.Helper()
	if f := c.hello(); f != flagFixedNewstyle|flagNoZeroes {
		c.t.Fatalf("handshake flags %#x", f)
	}
	if err := c.write(binary.BigEndian.AppendUint32(nil, flags)); err != nil {
		c.t.Fatal(err)
	}
}

func optBytes(opt uint32, data []byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, ihaveOpt)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

func (c *testClient) sendOpt(opt uint32, data []byte) {
	c.t.Helper()
	if err := c.write(optBytes(opt, data)); err != nil {
		c.t.Fatal(err)
	}
}

type optReply struct {
	opt, typ uint32
	data     []byte
}

func (c *testClient) readOptReply() (optReply, error) {
	h, err := c.readN(20)
	if err != nil {
		return optReply{}, err
	}
	if m := binary.BigEndian.Uint64(h); m != optReplyMagic {
		return optReply{}, fmt.Errorf("option reply magic %#x", m)
	}
	r := optReply{opt: binary.BigEndian.Uint32(h[8:]), typ: binary.BigEndian.Uint32(h[12:])}
	n := binary.BigEndian.Uint32(h[16:])
	if n > 1<<20 {
		return r, fmt.Errorf("option reply length %d", n)
	}
	r.data, err = c.readN(int(n))
	return r, err
}

func goData(name string, infos ...uint16) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(infos)))
	for _, i := range infos {
		b = binary.BigEndian.AppendUint16(b, i)
	}
	return b
}

// infoResult is the parsed outcome of NBD_OPT_INFO / NBD_OPT_GO.
type infoResult struct {
	errType          uint32 // 0 on success
	size             uint64
	tflags           uint16
	min, pref, max   uint32
	name, desc       string
	gotName, gotDesc bool
}

// infoGo sends NBD_OPT_INFO or NBD_OPT_GO and reads replies until ACK or
// an error reply.
func (c *testClient) infoGo(opt uint32, name string, infos ...uint16) infoResult {
	c.t.Helper()
	c.sendOpt(opt, goData(name, infos...))
	var res infoResult
	gotExport := false
	for {
		r, err := c.readOptReply()
		if err != nil {
			c.t.Fatalf("reading reply to option %d: %v", opt, err)
		}
		if r.opt != opt {
			c.t.Fatalf("reply for option %d, want %d", r.opt, opt)
		}
		switch {
		case r.typ == repAck:
			if !gotExport {
				c.t.Fatal("ACK without NBD_INFO_EXPORT")
			}
			return res
		case r.typ&repFlagError != 0:
			res.errType = r.typ
			return res
		case r.typ != repInfo:
			c.t.Fatalf("reply type %#x", r.typ)
		case len(r.data) < 2:
			c.t.Fatalf("short info %x", r.data)
		}
		switch binary.BigEndian.Uint16(r.data) {
		case infoExport:
			if len(r.data) != 12 {
				c.t.Fatalf("NBD_INFO_EXPORT length %d", len(r.data))
			}
			gotExport = true
			res.size = binary.BigEndian.Uint64(r.data[2:])
			res.tflags = binary.BigEndian.Uint16(r.data[10:])
		case infoBlockSize:
			if len(r.data) != 14 {
				c.t.Fatalf("NBD_INFO_BLOCK_SIZE length %d", len(r.data))
			}
			res.min = binary.BigEndian.Uint32(r.data[2:])
			res.pref = binary.BigEndian.Uint32(r.data[6:])
			res.max = binary.BigEndian.Uint32(r.data[10:])
		case infoName:
			res.gotName, res.name = true, string(r.data[2:])
		case infoDescription:
			res.gotDesc, res.desc = true, string(r.data[2:])
		}
	}
}

// connect performs a full handshake with NBD_OPT_GO for name.
func connect(t testing.TB, addr, name string) (*testClient, infoResult) {
	t.Helper()
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	res := c.infoGo(optGo, name)
	if res.errType != 0 {
		t.Fatalf("NBD_OPT_GO %q: error reply %#x", name, res.errType)
	}
	return c, res
}

func reqBytes(typ, flags uint16, handle, off uint64, length uint32, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, requestMagic)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint64(b, handle)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, length)
	return append(b, payload...)
}

func (c *testClient) send(typ, flags uint16, handle, off uint64, length uint32, payload []byte) error {
	return c.write(reqBytes(typ, flags, handle, off, length, payload))
}

// readReply reads one simple reply; readLen gives the data length to read
// after a successful reply to a READ with that handle.
func (c *testClient) readReply(readLen func(handle uint64) int) (handle uint64, errno uint32, data []byte, err error) {
	h, err := c.readN(16)
	if err != nil {
		return 0, 0, nil, err
	}
	if m := binary.BigEndian.Uint32(h); m != simpleReplyMagic {
		return 0, 0, nil, fmt.Errorf("reply magic %#x", m)
	}
	errno = binary.BigEndian.Uint32(h[4:])
	handle = binary.BigEndian.Uint64(h[8:])
	if errno == 0 {
		if n := readLen(handle); n > 0 {
			data, err = c.readN(n)
		}
	}
	return handle, errno, data, err
}

var handleSeq uint64

// cmd sends one request and waits for its reply.
func (c *testClient) cmd(typ, flags uint16, off uint64, length uint32, payload []byte) (uint32, []byte) {
	c.t.Helper()
	handleSeq++
	h := handleSeq
	if err := c.send(typ, flags, h, off, length, payload); err != nil {
		c.t.Fatalf("sending %s: %v", cmdName(typ), err)
	}
	got, errno, data, err := c.readReply(func(uint64) int {
		if typ == cmdRead {
			return int(length)
		}
		return 0
	})
	if err != nil {
		c.t.Fatalf("reply to %s: %v", cmdName(typ), err)
	}
	if got != h {
		c.t.Fatalf("reply handle %d, want %d", got, h)
	}
	return errno, data
}

// expectClosed asserts the server closes the connection (after possibly
// sending some bytes).
func (c *testClient) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c.br)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatal("server did not close the connection")
		}
	}
}

// startServer serves b on a loopback TCP port until the test ends.
func startServer(t testing.TB, b Backend, o Options) (*Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	s := NewServer(b, o)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, l.Addr().String()
}

// needTool returns the path of an external tool, skipping the test when it
// is missing (failing instead when CI=true).
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found and CI=true: %v", name, err)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// testLogger logs through t at debug level.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
