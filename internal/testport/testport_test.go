package testport

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortsAreDistinctAndBindable(t *testing.T) {
	_, hi := candidates()
	seen := map[int]bool{}
	for range 50 {
		p, err := Free("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p >= hi {
			t.Fatalf("port %d is in the ephemeral range (from %d)", p, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d handed out but not bindable: %v", p, err)
		}
		l.Close()
	}
}

func TestNumberIsHeldUntilReleased(t *testing.T) {
	const kind = "testport-self-test" // a kind nothing else claims
	n, release, err := Number(kind, 1)
	if err != nil || n != 1 {
		t.Fatalf("first claim: %d, %v", n, err)
	}
	// The lock is per open file, so a second claim in this process
	// conflicts exactly as one in another process would.
	if _, _, err := Number(kind, 1); err == nil {
		t.Fatal("a held number was handed out again")
	}
	release()
	n, release, err = Number(kind, 1)
	if err != nil || n != 1 {
		t.Fatalf("claim after release: %d, %v", n, err)
	}
	release()
}
