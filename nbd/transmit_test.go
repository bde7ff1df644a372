package nbd

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestCommands(t *testing.T) {
	b := twoExports()
	e := b.export("disk")
	_, addr := startServer(t, b, Options{MaxRequest: 64 << 10})
	c, _ := connect(t, addr, "disk")

	pat := bytes.Repeat([]byte{0xab}, 8192)
	if errno, _ := c.cmd(cmdWrite, 0, 4096, 8192, pat); errno != 0 {
		t.Fatalf("WRITE errno %d", errno)
	}
	if errno, data := c.cmd(cmdRead, 0, 4096, 8192, nil); errno != 0 || !bytes.Equal(data, pat) {
		t.Fatalf("READ back: errno %d, equal %v", errno, bytes.Equal(data, pat))
	}

	// FUA: the backend flushed after the write, before the reply.
	flushes := b.flushes.Load()
	if errno, _ := c.cmd(cmdWrite, cmdFlagFUA, 0, 4, []byte("fua!")); errno != 0 {
		t.Fatalf("WRITE+FUA errno %d", errno)
	}
	if b.flushes.Load() != flushes+1 || b.lastFlush.Load() < e.lastWrite() {
		t.Fatalf("WRITE+FUA: flushes %d->%d, last flush %d, last write %d",
			flushes, b.flushes.Load(), b.lastFlush.Load(), e.lastWrite())
	}

	// FLUSH.
	if errno, _ := c.cmd(cmdFlush, 0, 0, 0, nil); errno != 0 || b.flushes.Load() != flushes+2 {
		t.Fatalf("FLUSH errno %d flushes %d", errno, b.flushes.Load())
	}

	// TRIM zeroes and is recorded as a trim.
	if errno, _ := c.cmd(cmdTrim, 0, 4096, 4096, nil); errno != 0 {
		t.Fatalf("TRIM errno %d", errno)
	}
	if got := e.bytes(4096, 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatal("TRIM left data")
	}
	if got := e.bytes(8192, 4096); !bytes.Equal(got, pat[:4096]) {
		t.Fatal("TRIM touched data past its range")
	}

	// WRITE_ZEROES, with and without NO_HOLE, with FUA.
	if errno, _ := c.cmd(cmdWriteZeroes, 0, 8192, 100, nil); errno != 0 {
		t.Fatalf("WRITE_ZEROES errno %d", errno)
	}
	flushes = b.flushes.Load()
	if errno, _ := c.cmd(cmdWriteZeroes, cmdFlagNoHole|cmdFlagFUA, 9000, 100, nil); errno != 0 {
		t.Fatalf("WRITE_ZEROES+NO_HOLE errno %d", errno)
	}
	if b.flushes.Load() != flushes+1 {
		t.Fatal("WRITE_ZEROES+FUA did not flush")
	}
	zs := e.zeroCalls()
	want := []zeroCall{{4096, 4096, true, true}, {8192, 100, true, false}, {9000, 100, false, false}}
	if fmt.Sprint(zs) != fmt.Sprint(want) {
		t.Fatalf("zero calls %v, want %v", zs, want)
	}
	if got := e.bytes(8192, 1000); bytes.Count(got, []byte{0}) != 200 {
		t.Fatalf("WRITE_ZEROES zeroed %d bytes, want 200", bytes.Count(got, []byte{0}))
	}

	// Zero-length requests are no-ops, also at the very end.
	for _, typ := range []uint16{cmdRead, cmdWrite, cmdTrim, cmdWriteZeroes} {
		if errno, _ := c.cmd(typ, 0, testSize, 0, nil); errno != 0 {
			t.Errorf("zero-length %s at end: errno %d", cmdName(typ), errno)
		}
	}
}

func TestCommandErrors(t *testing.T) {
	b := twoExports()
	e := b.export("disk")
	const maxReq = 64 << 10
	_, addr := startServer(t, b, Options{MaxRequest: maxReq})
	c, _ := connect(t, addr, "disk")
	type tc struct {
		name    string
		typ     uint16
		flags   uint16
		off     uint64
		length  uint32
		payload []byte
		errno   uint32
	}
	for _, x := range []tc{
		{"read past end", cmdRead, 0, testSize - 1, 2, nil, errnoInval},
		{"read at end+1", cmdRead, 0, testSize + 1, 0, nil, errnoInval},
		{"read offset overflow", cmdRead, 0, math.MaxUint64, 4096, nil, errnoInval},
		{"read over MaxRequest", cmdRead, 0, 0, maxReq + 1, nil, errnoInval},
		{"read 4 GiB", cmdRead, 0, 0, math.MaxUint32, nil, errnoInval},
		{"write past end", cmdWrite, 0, testSize - 2, 4, []byte("abcd"), errnoNoSpc},
		{"write offset overflow", cmdWrite, 0, math.MaxUint64 - 1, 4, []byte("abcd"), errnoNoSpc},
		{"trim past end", cmdTrim, 0, testSize, 1, nil, errnoInval},
		{"trim 4 GiB", cmdTrim, 0, 0, math.MaxUint32, nil, errnoInval},
		{"write zeroes past end", cmdWriteZeroes, 0, 1, testSize, nil, errnoNoSpc},
		{"unknown command", 99, 0, 0, 0, nil, errnoInval},
		{"CACHE", cmdCache, 0, 0, 4096, nil, errnoInval},
		{"BLOCK_STATUS", cmdBlockStatus, 0, 0, 4096, nil, errnoInval},
		{"unknown flag", cmdRead, 1 << 9, 0, 1, nil, errnoInval},
		{"DF flag", cmdRead, cmdFlagDF, 0, 1, nil, errnoInval},
		{"NO_HOLE on WRITE", cmdWrite, cmdFlagNoHole, 0, 1, []byte("x"), errnoInval},
	} {
		if errno, _ := c.cmd(x.typ, x.flags, x.off, x.length, x.payload); errno != x.errno {
			t.Errorf("%s: errno %s, want %s", x.name, errnoName(errno), errnoName(x.errno))
		}
	}
	if n := b.writeAts.Load(); n != 0 {
		t.Fatalf("%d backend writes from rejected requests", n)
	}
	// Still in sync after all that.
	if errno, data := c.cmd(cmdRead, 0, testSize-3, 3, nil); errno != 0 || len(data) != 3 {
		t.Fatalf("READ after errors: %d", errno)
	}

	// Bounds follow a shrinking export.
	e.resize(4096)
	if errno, _ := c.cmd(cmdRead, 0, 4096, 1, nil); errno != errnoInval {
		t.Fatalf("read past shrunk end: %d", errno)
	}
	if errno, _ := c.cmd(cmdRead, 0, 4095, 1, nil); errno != 0 {
		t.Fatalf("read inside shrunk end: %d", errno)
	}
}

func TestBackendErrorMapping(t *testing.T) {
	b := twoExports()
	e := b.export("disk")
	_, addr := startServer(t, b, Options{})
	c, _ := connect(t, addr, "disk")
	for _, x := range []struct {
		err   error
		errno uint32
	}{
		{errors.New("segment corrupt"), errnoIO},
		{fmt.Errorf("put: %w", syscall.ENOSPC), errnoNoSpc},
		{fmt.Errorf("quota: %w", syscall.EDQUOT), errnoNoSpc},
		{fmt.Errorf("ro: %w", syscall.EROFS), errnoPerm},
		{syscall.EPERM, errnoPerm},
		{syscall.EOPNOTSUPP, errnoNotSup},
		{fmt.Errorf("x: %w", syscall.EIO), errnoIO},
	} {
		e.setFail(x.err)
		for _, typ := range []uint16{cmdRead, cmdWrite, cmdTrim, cmdWriteZeroes, cmdFlush} {
			var p []byte
			if typ == cmdWrite {
				p = []byte("z")
			}
			if errno, data := c.cmd(typ, 0, 0, 1, p); errno != x.errno || data != nil {
				t.Errorf("%s with %v: errno %s (data %d), want %s", cmdName(typ), x.err, errnoName(errno), len(data), errnoName(x.errno))
			}
		}
	}
	e.setFail(nil)
	if errno, _ := c.cmd(cmdRead, 0, 0, 1, nil); errno != 0 {
		t.Fatalf("READ after clearing the failure: %d", errno)
	}
}

// TestConcurrentRequests pipelines many requests on one connection: they run
// concurrently (bounded), every reply arrives whole with its handle.
func TestConcurrentRequests(t *testing.T) {
	b := twoExports()
	e := b.export("disk")
	gate := make(chan struct{})
	var once sync.Once
	e.hook = func(op string) {
		if op == "read" {
			<-gate
		}
	}
	_, addr := startServer(t, b, Options{})
	c, _ := connect(t, addr, "disk")
	const n = 64
	const blk = 4096
	for i := range n {
		p := bytes.Repeat([]byte{byte(i)}, blk)
		if errno, _ := c.cmd(cmdWrite, 0, uint64(i*blk), blk, p); errno != 0 {
			t.Fatalf("WRITE %d: %d", i, errno)
		}
	}
	go func() {
		for i := range n {
			if err := c.send(cmdRead, 0, uint64(1000+i), uint64(i*blk), blk, nil); err != nil {
				t.Errorf("send: %v", err)
				return
			}
		}
	}()
	// Let the server fill its in-flight slots, then release the reads.
	deadline := time.Now().Add(10 * time.Second)
	for e.inFlight.Load() < maxInFlight && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	once.Do(func() { close(gate) })
	seen := make(map[uint64]bool)
	for range n {
		h, errno, data, err := c.readReply(func(uint64) int { return blk })
		if err != nil || errno != 0 {
			t.Fatalf("reply: %v errno %d", err, errno)
		}
		i := h - 1000
		if h < 1000 || i >= n || seen[h] {
			t.Fatalf("unexpected handle %d", h)
		}
		seen[h] = true
		if !bytes.Equal(data, bytes.Repeat([]byte{byte(i)}, blk)) {
			t.Fatalf("READ %d: wrong data", i)
		}
	}
	if m := e.maxSeen.Load(); m != maxInFlight {
		t.Fatalf("max concurrent backend calls %d, want %d", m, maxInFlight)
	}
}

// TestMultiConnFlush: a FLUSH on one connection is a barrier for a write
// completed on another.
func TestMultiConnFlush(t *testing.T) {
	b := twoExports()
	e := b.export("disk")
	_, addr := startServer(t, b, Options{})
	c1, r1 := connect(t, addr, "disk")
	c2, _ := connect(t, addr, "disk")
	if r1.tflags&tflagCanMultiConn == 0 {
		t.Fatal("CAN_MULTI_CONN not advertised")
	}
	if errno, _ := c1.cmd(cmdWrite, 0, 0, 5, []byte("hello")); errno != 0 {
		t.Fatal(errno)
	}
	w := e.lastWrite()
	if b.lastFlush.Load() > w {
		t.Fatal("flush before the test flushed")
	}
	if errno, _ := c2.cmd(cmdFlush, 0, 0, 0, nil); errno != 0 {
		t.Fatal(errno)
	}
	if f := b.lastFlush.Load(); f <= w {
		t.Fatalf("backend flush seq %d not after write seq %d", f, w)
	}
	if errno, data := c2.cmd(cmdRead, 0, 0, 5, nil); errno != 0 || string(data) != "hello" {
		t.Fatalf("read on the other connection: %d %q", errno, data)
	}
}

// TestCloseWaitsForInFlight: Close answers requests already received before
// it closes the connection.
func TestCloseWaitsForInFlight(t *testing.T) {
	b := twoExports()
	e := b.export("disk")
	entered := make(chan struct{})
	release := make(chan struct{})
	e.hook = func(op string) {
		if op == "write" {
			close(entered)
			<-release
		}
	}
	s, addr := startServer(t, b, Options{})
	c, _ := connect(t, addr, "disk")
	idle, _ := connect(t, addr, "other")
	if err := c.send(cmdWrite, 0, 7, 0, 3, []byte("xyz")); err != nil {
		t.Fatal(err)
	}
	<-entered
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned with a request in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	h, errno, _, err := c.readReply(func(uint64) int { return 0 })
	if err != nil || h != 7 || errno != 0 {
		t.Fatalf("in-flight reply: handle %d errno %d err %v", h, errno, err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	c.expectClosed()
	idle.expectClosed()
	if got := e.bytes(0, 3); string(got) != "xyz" {
		t.Fatalf("write not applied: %q", got)
	}
	if b.opens.Load() != b.closes.Load() {
		t.Fatalf("opens %d, closes %d", b.opens.Load(), b.closes.Load())
	}
}
