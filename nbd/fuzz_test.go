package nbd

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/nbd/nbdtest"
)

const fuzzExportSize = 64 << 10

// fuzzServe feeds input to one server connection over net.Pipe and checks
// that the server neither hangs nor leaks the export nor passes a bad range
// to the backend.
func fuzzServe(t *testing.T, input []byte) *memBackend {
	b, _ := fuzzServeOut(t, input)
	return b
}

// fuzzServeOut is fuzzServe that also returns what the server sent.
func fuzzServeOut(t *testing.T, input []byte) (*memBackend, []byte) {
	return fuzzServeTLS(t, input, nil)
}

// fuzzServeTLS is fuzzServeOut on a connection that requires TLS with cfg
// (none when nil).
func fuzzServeTLS(t *testing.T, input []byte, cfg *tls.Config) (*memBackend, []byte) {
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
		var start tlsStart
		if cfg != nil {
			start = x509Start(cfg)
		}
		if done := s.startConn(srv, start); done != nil {
			<-done
		}
	}()
	drained := make(chan struct{})
	var out bytes.Buffer
	go func() {
		defer close(drained)
		io.Copy(&out, cli) // replies, until the server closes
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
	return b, out.Bytes()
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

// structuredPrefix is a client stream up to a successful NBD_OPT_GO for
// "disk" with structured replies and base:allocation negotiated.
var structuredPrefix = cat(u32(clientFlagFixedNewstyle|clientFlagNoZeroes),
	optBytes(optStructuredReply, nil),
	optBytes(optSetMetaContext, metaData("disk", metaBaseAlloc)),
	optBytes(optGo, goData("disk", infoBlockSize)))

// FuzzOptions fuzzes the options this server added to the plain
// handshake: structured replies, meta context lists and STARTTLS.
func FuzzOptions(f *testing.F) {
	flags := u32(clientFlagFixedNewstyle | clientFlagNoZeroes)
	f.Add(structuredPrefix)
	f.Add(cat(flags, optBytes(optListMetaContext, metaData("disk")), optBytes(optListMetaContext, metaData("", "base:"))))
	f.Add(cat(flags, optBytes(optSetMetaContext, metaData("disk", metaBaseAlloc)), optBytes(optStructuredReply, []byte{1})))
	f.Add(cat(flags, optBytes(optStructuredReply, nil), optBytes(optSetMetaContext, metaData("small", metaBaseAlloc, "qemu:x")),
		optBytes(optGo, goData("disk")), reqBytes(cmdBlockStatus, 0, 1, 0, 4096, nil)))
	f.Add(cat(flags, optBytes(optListMetaContext, []byte{0, 0, 0, 4, 'd', 'i', 's', 'k', 0xff, 0xff, 0xff, 0xff})))
	f.Add(cat(flags, optBytes(optStartTLS, nil), optBytes(optStartTLS, []byte{1})))
	f.Fuzz(func(t *testing.T, input []byte) {
		fuzzServe(t, input)
	})
}

// FuzzStructured fuzzes requests on a connection with structured replies
// and base:allocation, and checks that every reply is a well-formed
// sequence of chunks.
func FuzzStructured(f *testing.F) {
	w := bytes.Repeat([]byte{0x42}, 512)
	f.Add(reqBytes(cmdBlockStatus, 0, 1, 0, fuzzExportSize, nil))
	f.Add(cat(reqBytes(cmdWrite, 0, 2, 8192, 512, w), reqBytes(cmdBlockStatus, cmdFlagReqOne, 3, 4096, 8192, nil)))
	f.Add(cat(reqBytes(cmdWrite, 0, 2, 8192, 512, w), reqBytes(cmdRead, 0, 3, 0, 4096, nil), reqBytes(cmdRead, cmdFlagDF, 4, 0, 4096, nil)))
	f.Add(reqBytes(cmdBlockStatus, 0, 5, fuzzExportSize-1, 2, nil))
	f.Add(reqBytes(cmdBlockStatus, 0xffff, 6, 0, 0, nil))
	f.Add(cat(reqBytes(cmdTrim, cmdFlagFUA, 7, 0, 100, nil), reqBytes(99, 0, 8, 0, 1, nil), reqBytes(cmdRead, 0, 9, 0xffffffffffffff00, 0x1000, nil)))
	f.Fuzz(func(t *testing.T, input []byte) {
		_, out := fuzzServeOut(t, cat(structuredPrefix, input))
		if err := checkStructuredStream(out); err != nil {
			t.Fatal(err)
		}
	})
}

// checkStructuredStream checks a server stream that negotiated
// structured replies: greeting, option replies up to GO's ACK, then whole
// chunks of known types with consistent payloads.
func checkStructuredStream(out []byte) error {
	if len(out) < 18 {
		return fmt.Errorf("short greeting: %d bytes", len(out))
	}
	out = out[18:]
	for {
		if len(out) < 20 {
			return fmt.Errorf("stream ends in the handshake (%d bytes left)", len(out))
		}
		if binary.BigEndian.Uint64(out) != optReplyMagic {
			return fmt.Errorf("option reply magic %x", out[:8])
		}
		opt, typ, n := binary.BigEndian.Uint32(out[8:]), binary.BigEndian.Uint32(out[12:]), binary.BigEndian.Uint32(out[16:])
		if uint64(len(out)-20) < uint64(n) {
			return fmt.Errorf("option reply cut short")
		}
		out = out[20+n:]
		if opt == optGo && typ == repAck {
			break
		}
		if typ&repFlagError != 0 && opt != optInfo {
			return fmt.Errorf("option %d failed: %#x", opt, typ)
		}
	}
	for len(out) > 0 {
		if len(out) < structHeaderSize {
			return fmt.Errorf("partial chunk header at the end: %x", out)
		}
		if m := binary.BigEndian.Uint32(out); m != structReplyMagic {
			return fmt.Errorf("reply magic %#x after structured replies", m)
		}
		typ, n := binary.BigEndian.Uint16(out[6:]), binary.BigEndian.Uint32(out[16:])
		if uint64(len(out)-structHeaderSize) < uint64(n) {
			return fmt.Errorf("chunk of type %d cut short", typ)
		}
		p := out[structHeaderSize : structHeaderSize+int(n)]
		if err := checkChunk(typ, p); err != nil {
			return err
		}
		out = out[structHeaderSize+int(n):]
	}
	return nil
}

func checkChunk(typ uint16, p []byte) error {
	switch typ {
	case replyTypeNone:
		if len(p) != 0 {
			return fmt.Errorf("NONE chunk with %d bytes", len(p))
		}
	case replyTypeOffsetData:
		if len(p) <= 8 || binary.BigEndian.Uint64(p)+uint64(len(p)-8) > fuzzExportSize {
			return fmt.Errorf("OFFSET_DATA chunk %d bytes at %x", len(p), p[:min(8, len(p))])
		}
	case replyTypeOffsetHole:
		if len(p) != 12 || binary.BigEndian.Uint32(p[8:]) == 0 ||
			binary.BigEndian.Uint64(p)+uint64(binary.BigEndian.Uint32(p[8:])) > fuzzExportSize {
			return fmt.Errorf("OFFSET_HOLE chunk %x", p)
		}
	case replyTypeBlockStatus:
		if len(p) < 12 || (len(p)-4)%8 != 0 || binary.BigEndian.Uint32(p) != metaAllocID {
			return fmt.Errorf("BLOCK_STATUS chunk %x", p)
		}
		var total uint64
		for d := p[4:]; len(d) > 0; d = d[8:] {
			l, fl := binary.BigEndian.Uint32(d), binary.BigEndian.Uint32(d[4:])
			if l == 0 || (fl != 0 && fl != stateHole|stateZero) {
				return fmt.Errorf("BLOCK_STATUS descriptor %x", d[:8])
			}
			total += uint64(l)
		}
		if total > fuzzExportSize {
			return fmt.Errorf("BLOCK_STATUS describes %d bytes of a %d-byte export", total, fuzzExportSize)
		}
	case replyTypeError:
		if len(p) < 6 || int(binary.BigEndian.Uint16(p[4:])) != len(p)-6 || binary.BigEndian.Uint32(p) == 0 {
			return fmt.Errorf("ERROR chunk %x", p)
		}
	default:
		return fmt.Errorf("chunk type %d", typ)
	}
	return nil
}

// FuzzParseMetaRequest checks the meta context payload parser: it never
// fails on input, and what it accepts re-encodes to the same bytes.
func FuzzParseMetaRequest(f *testing.F) {
	f.Add(metaData("disk", metaBaseAlloc))
	f.Add(metaData("", "base:", "qemu:dirty-bitmap:a"))
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, bad := parseMetaRequest(data)
		if bad != "" {
			return
		}
		if again := metaData(m.export, m.queries...); !bytes.Equal(again, data) {
			t.Fatalf("accepted %x, re-encodes as %x", data, again)
		}
	})
}

// FuzzTLSGate fuzzes the handshake of a connection that requires TLS:
// before STARTTLS only ABORT and STARTTLS may get anything but
// NBD_REP_ERR_TLS_REQD, and whatever follows STARTTLS goes to the TLS
// handshake (which must fail on these inputs: the fuzzer speaks no TLS).
func FuzzTLSGate(f *testing.F) {
	p, err := nbdtest.NewPKI(f.TempDir(), "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	cfg, err := LoadTLSConfig(TLSFiles{Cert: p.ServerCert(), Key: p.ServerKey()})
	if err != nil {
		f.Fatal(err)
	}
	flags := u32(clientFlagFixedNewstyle | clientFlagNoZeroes)
	f.Add(goPrefix)
	f.Add(structuredPrefix)
	f.Add(cat(flags, optBytes(optList, nil), optBytes(optStartTLS, nil), []byte{0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0}))
	f.Add(cat(flags, optBytes(optStartTLS, []byte{1}), optBytes(optExportName, []byte("disk"))))
	f.Fuzz(func(t *testing.T, input []byte) {
		b, out := fuzzServeTLS(t, input, cfg)
		if n := b.opens.Load(); n != 0 {
			t.Fatalf("an export was opened %d times without TLS", n)
		}
		if err := checkTLSGate(out); err != nil {
			t.Fatal(err)
		}
	})
}

// checkTLSGate checks the option replies of a TLS-required handshake up
// to a STARTTLS ACK: nothing but TLS_REQD, ABORT's ACK and STARTTLS's
// answers.
func checkTLSGate(out []byte) error {
	if len(out) < 18 {
		return nil // closed before the greeting was read
	}
	for out = out[18:]; len(out) >= 20; {
		opt, typ, n := binary.BigEndian.Uint32(out[8:]), binary.BigEndian.Uint32(out[12:]), binary.BigEndian.Uint32(out[16:])
		switch {
		case binary.BigEndian.Uint64(out) != optReplyMagic:
			return fmt.Errorf("option reply magic %x", out[:8])
		case opt == optStartTLS && typ == repAck:
			return nil // the rest is TLS
		case opt == optStartTLS, opt == optAbort && typ == repAck, typ == repErrTLSReqd, typ == repErrTooBig:
		default:
			return fmt.Errorf("option %d answered %#x before STARTTLS", opt, typ)
		}
		if uint64(len(out)-20) < uint64(n) {
			return fmt.Errorf("option reply cut short")
		}
		out = out[20+n:]
	}
	return nil
}
