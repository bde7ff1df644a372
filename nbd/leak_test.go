package nbd

import (
	"bytes"
	"net"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// No goroutine outlives Server.Close: connections in transmission, one
// idle, one in the handshake, and their requests all end with it.
func TestNoGoroutineOutlivesServerClose(t *testing.T) {
	leaks := testutil.SnapshotGoroutines()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(newMemBackend(map[string]int64{"disk": 1 << 20}), Options{Logger: testLogger(t)})
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	addr := l.Addr().String()

	busy, _ := connect(t, addr, "disk")
	idle, _ := connect(t, addr, "disk")
	handshaking := dialClient(t, addr)
	handshaking.hello()
	pat := bytes.Repeat([]byte("leak"), 2048)
	for i := uint64(0); i < 16; i++ {
		if errno, _ := busy.cmd(cmdWrite, 0, i*8192, 8192, pat); errno != 0 {
			t.Fatalf("write: errno %d", errno)
		}
	}
	if errno, data := busy.cmd(cmdRead, 0, 8192, 8192, nil); errno != 0 || !bytes.Equal(data, pat) {
		t.Fatalf("read back: errno %d", errno)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	for _, c := range []*testClient{busy, idle, handshaking} {
		c.expectClosed()
		c.nc.Close()
	}
	leaks.Check(t, 10*time.Second)
}
