package nbd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// checkServing asserts the server still serves a fresh client.
func checkServing(t *testing.T, addr string) {
	t.Helper()
	c, _ := connect(t, addr, "disk")
	if errno, data := c.cmd(cmdRead, 0, 0, 16, nil); errno != 0 || len(data) != 16 {
		t.Fatalf("fresh client READ: errno %d", errno)
	}
}

func TestHostileHandshake(t *testing.T) {
	b := twoExports()
	_, addr := startServer(t, b, Options{})
	cases := []struct {
		name string
		run  func(c *testClient)
	}{
		{"unknown client flags", func(c *testClient) {
			c.hello()
			c.write([]byte{0, 0, 0, 0x80 | 3})
		}},
		{"bad option magic", func(c *testClient) {
			c.start(clientFlagFixedNewstyle)
			c.write(append([]byte("NBDMAGIC"), 0, 0, 0, 7, 0, 0, 0, 0))
		}},
		{"oversized EXPORT_NAME", func(c *testClient) {
			c.start(clientFlagFixedNewstyle)
			h := binary.BigEndian.AppendUint64(nil, ihaveOpt)
			h = binary.BigEndian.AppendUint32(h, optExportName)
			h = binary.BigEndian.AppendUint32(h, 1<<31)
			c.write(h)
		}},
		{"truncated client flags", func(c *testClient) {
			c.hello()
			c.write([]byte{0, 0})
			c.nc.(interface{ CloseWrite() error }).CloseWrite()
		}},
		{"truncated option header", func(c *testClient) {
			c.start(clientFlagFixedNewstyle)
			c.write(optBytes(optGo, nil)[:10])
			c.nc.(interface{ CloseWrite() error }).CloseWrite()
		}},
		{"truncated option payload", func(c *testClient) {
			c.start(clientFlagFixedNewstyle)
			c.write(optBytes(optGo, goData("disk"))[:20])
			c.nc.(interface{ CloseWrite() error }).CloseWrite()
		}},
		{"export name with NUL", func(c *testClient) {
			c.start(clientFlagFixedNewstyle)
			c.sendOpt(optExportName, []byte("disk\x00"))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialClient(t, addr)
			tc.run(c)
			c.expectClosed()
			checkServing(t, addr)
		})
	}
}

func TestHostileOversizedOption(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	for _, n := range []uint32{maxOptionLength + 1, 1 << 31, 0xffffffff} {
		c := dialClient(t, addr)
		c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
		h := binary.BigEndian.AppendUint64(nil, ihaveOpt)
		h = binary.BigEndian.AppendUint32(h, optGo)
		h = binary.BigEndian.AppendUint32(h, n)
		c.write(h)
		r, err := c.readOptReply()
		if err != nil || r.typ != repErrTooBig {
			t.Fatalf("length %d: reply %+v err %v", n, r, err)
		}
		c.expectClosed()
	}
	checkServing(t, addr)
}

func TestHostileTooManyOptions(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	go func() {
		for range maxOptions + 10 {
			if c.write(optBytes(0x1234, nil)) != nil {
				return
			}
		}
	}()
	replies := 0
	for {
		if _, err := c.readOptReply(); err != nil {
			break
		}
		replies++
	}
	if replies != maxOptions {
		t.Fatalf("%d replies before close, want %d", replies, maxOptions)
	}
	checkServing(t, addr)
}

func TestHostileTransmission(t *testing.T) {
	b := twoExports()
	e := b.export("disk")
	const maxReq = 64 << 10
	_, addr := startServer(t, b, Options{MaxRequest: maxReq})

	t.Run("bad request magic", func(t *testing.T) {
		c, _ := connect(t, addr, "disk")
		r := reqBytes(cmdRead, 0, 1, 0, 4, nil)
		r[0] ^= 0xff
		c.write(r)
		c.expectClosed()
		checkServing(t, addr)
	})
	t.Run("oversized WRITE", func(t *testing.T) {
		c, _ := connect(t, addr, "disk")
		c.send(cmdWrite, 0, 5, 0, maxReq+1, nil)
		h, errno, _, err := c.readReply(func(uint64) int { return 0 })
		if err != nil || h != 5 || errno != errnoInval {
			t.Fatalf("oversized WRITE: handle %d errno %d err %v", h, errno, err)
		}
		c.expectClosed()
		checkServing(t, addr)
	})
	t.Run("truncated request header", func(t *testing.T) {
		c, _ := connect(t, addr, "disk")
		c.write(reqBytes(cmdRead, 0, 1, 0, 4, nil)[:20])
		c.nc.(interface{ CloseWrite() error }).CloseWrite()
		c.expectClosed()
		checkServing(t, addr)
	})
	t.Run("disconnect mid-write", func(t *testing.T) {
		before := b.writeAts.Load()
		c, _ := connect(t, addr, "disk")
		payload := make([]byte, 1000)
		for i := range payload {
			payload[i] = 0xee
		}
		c.send(cmdWrite, 0, 1, 0, 32<<10, payload)
		c.nc.Close()
		checkServing(t, addr)
		// The server notices the disconnect; give it a moment, then
		// assert nothing was applied.
		time.Sleep(50 * time.Millisecond)
		if n := b.writeAts.Load(); n != before {
			t.Fatalf("partial WRITE reached the backend (%d calls)", n-before)
		}
		for _, x := range e.bytes(0, 1000) {
			if x != 0 {
				t.Fatal("partial WRITE payload applied")
			}
		}
	})
	t.Run("disconnect with requests in flight", func(t *testing.T) {
		c, _ := connect(t, addr, "disk")
		for i := range 32 {
			c.send(cmdRead, 0, uint64(i), 0, maxReq, nil)
		}
		c.nc.Close()
		checkServing(t, addr)
	})
}

// TestHostileStructured sends oversized lengths, unknown commands and
// contexts and ranges past the end on a structured connection: each gets
// an error chunk and the connection goes on.
func TestHostileStructured(t *testing.T) {
	b := twoExports()
	_, addr := startServer(t, b, Options{MaxRequest: 64 << 10})
	c, _ := connectStructured(t, addr, "disk")
	for _, tc := range []struct {
		name       string
		typ, flags uint16
		off        uint64
		length     uint32
		errno      uint32
	}{
		{"READ of 4 GiB", cmdRead, 0, 0, 0xffffffff, errnoInval},
		{"BLOCK_STATUS of 4 GiB", cmdBlockStatus, 0, 0, 0xffffffff, errnoInval},
		{"BLOCK_STATUS at 2^64-1", cmdBlockStatus, 0, ^uint64(0), 1, errnoInval},
		{"READ with every flag", cmdRead, 0xffff, 0, 512, errnoInval},
		{"command 200", 200, 0, 0, 512, errnoInval},
		{"CACHE", cmdCache, 0, 0, 512, errnoInval},
		{"TRIM past the end", cmdTrim, 0, testSize, 1, errnoInval},
	} {
		if got := chunkErrno(t, c.structuredCmd(tc.typ, tc.flags, tc.off, tc.length, nil)); got != tc.errno {
			t.Errorf("%s: errno %d, want %d", tc.name, got, tc.errno)
		}
	}
	if d := blockStatusOf(t, c.structuredCmd(cmdBlockStatus, 0, 0, 4096, nil)); len(d) != 1 {
		t.Fatalf("BLOCK_STATUS after the errors: %v", d)
	}
	// Unknown contexts select nothing: BLOCK_STATUS is then invalid.
	u := dialClient(t, addr)
	u.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	u.sendOpt(optStructuredReply, nil)
	u.readOptReply()
	if got, typ := u.metaContexts(optSetMetaContext, metaData("disk", "qemu:dirty-bitmap:x", "base:allocation2", "")); typ != repAck || len(got) != 0 {
		t.Fatalf("SET of unknown contexts: %v %#x", got, typ)
	}
	if res := u.infoGo(optGo, "disk"); res.errType != 0 {
		t.Fatal("GO")
	}
	if e := chunkErrno(t, u.structuredCmd(cmdBlockStatus, 0, 0, 4096, nil)); e != errnoInval {
		t.Fatalf("BLOCK_STATUS with no context: errno %d", e)
	}
}

// TestHostileHalfClose: a client that sends requests and shuts down its
// write side still gets every reply, then the server closes.
func TestHostileHalfClose(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	c, _ := connect(t, addr, "disk")
	const n = 8
	for i := range n {
		c.send(cmdRead, 0, uint64(100+i), uint64(i)*4096, 4096, nil)
	}
	c.nc.(interface{ CloseWrite() error }).CloseWrite()
	seen := map[uint64]bool{}
	for range n {
		h, errno, data, err := c.readReply(func(uint64) int { return 4096 })
		if err != nil || errno != 0 || len(data) != 4096 {
			t.Fatalf("reply after half-close: handle %d errno %d err %v", h, errno, err)
		}
		seen[h] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct replies, want %d", len(seen), n)
	}
	c.expectClosed()
	checkServing(t, addr)
}

// TestHostileIdleAndStuckClients: a thousand idle connections (half in
// the handshake, half after GO) and a client that never reads its
// replies do not slow a working client down.
func TestHostileIdleAndStuckClients(t *testing.T) {
	b := twoExports()
	s, addr := startServer(t, b, Options{MaxRequest: 1 << 20})
	const idle = 1000
	for i := range idle {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		t.Cleanup(func() { nc.Close() })
		if i%2 == 1 {
			c := &testClient{t: t, nc: nc, br: bufio.NewReader(nc)}
			c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
			if res := c.infoGo(optGo, "disk"); res.errType != 0 {
				t.Fatalf("GO on idle connection %d: %#x", i, res.errType)
			}
		}
	}
	testutil.Eventually(t, 30*time.Second, "the server to hold every idle connection", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.mu.conns) >= idle
	})

	stuck, _ := connect(t, addr, "disk")
	for i := range 64 {
		// 64 MiB of replies nobody reads: the server blocks writing them
		// on this connection only.
		stuck.send(cmdRead, 0, uint64(i), 0, 1<<20, nil)
	}

	start := time.Now()
	c, _ := connect(t, addr, "disk")
	pat := bytes.Repeat([]byte{0x77}, 4096)
	for i := range 100 {
		off := uint64(i) * 4096
		if errno, _ := c.cmd(cmdWrite, cmdFlagFUA, off, 4096, pat); errno != 0 {
			t.Fatalf("WRITE: errno %d", errno)
		}
		if errno, data := c.cmd(cmdRead, 0, off, 4096, nil); errno != 0 || !bytes.Equal(data, pat) {
			t.Fatalf("READ back: errno %d", errno)
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("200 requests beside %d idle and one stuck connection took %s", idle, d)
	}
	stuck.nc.Close() // lets its blocked replies fail now rather than at the write timeout
}
