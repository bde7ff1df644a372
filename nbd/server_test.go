package nbd

import (
	"errors"
	"net"
	"testing"
	"time"
)

func TestServeLifecycle(t *testing.T) {
	b := twoExports()
	s := NewServer(b, Options{Logger: testLogger(t)})

	// A listener closed by its owner ends Serve with an error.
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done1 := make(chan error, 1)
	go func() { done1 <- s.Serve(l1) }()
	c, _ := connect(t, l1.Addr().String(), "disk")
	l1.Close()
	if err := <-done1; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve after the listener closed: %v", err)
	}
	// Existing connections keep working.
	if errno, _ := c.cmd(cmdFlush, 0, 0, 0, nil); errno != 0 {
		t.Fatalf("FLUSH after listener close: %d", errno)
	}

	// Two listeners on one server; Close stops both and returns nil.
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	l3, _ := net.Listen("tcp", "127.0.0.1:0")
	done2, done3 := make(chan error, 1), make(chan error, 1)
	go func() { done2 <- s.Serve(l2) }()
	go func() { done3 <- s.Serve(l3) }()
	connect(t, l2.Addr().String(), "disk")
	connect(t, l3.Addr().String(), "other")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []chan error{done2, done3} {
		select {
		case err := <-d:
			if err != nil {
				t.Fatalf("Serve after Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after Close")
		}
	}
	c.expectClosed()
	if o, cl := b.opens.Load(), b.closes.Load(); o != 3 || cl != 3 {
		t.Fatalf("opens %d closes %d, want 3/3", o, cl)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	l4, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := s.Serve(l4); err != nil {
		t.Fatalf("Serve on a closed server: %v", err)
	}
	if _, err := net.Dial("tcp", l4.Addr().String()); err == nil {
		t.Fatal("listener left open by Serve on a closed server")
	}
}

func TestOptionsDefaults(t *testing.T) {
	for _, x := range []struct{ in, want int }{
		{0, defaultMaxRequest}, {-1, defaultMaxRequest}, {100, 4096}, {1 << 20, 1 << 20}, {1 << 40, 1 << 30},
	} {
		o := Options{MaxRequest: x.in}
		o.EnsureDefaults()
		if o.MaxRequest != x.want || o.Logger == nil {
			t.Errorf("MaxRequest %d -> %d, want %d", x.in, o.MaxRequest, x.want)
		}
	}
}
