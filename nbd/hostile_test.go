package nbd

import (
	"encoding/binary"
	"testing"
	"time"
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
