// Package testport hands out TCP ports to tests that start servers as
// child processes, so that test binaries running at the same time (make
// test runs several) never give two servers the same port.
//
// A port is taken below the kernel's ephemeral range, where no outgoing
// connection can claim it between the check and the server's bind, and
// it is claimed for the life of the calling process with an flock on a
// file named after it: other processes (and other calls in this one)
// skip a claimed port, and a claim ends by itself when its process dies.
package testport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// claims holds the open claim files: closing one would release its port.
var claims struct {
	sync.Mutex
	files []*os.File
}

// Free returns a port on host that no other caller in any process holds
// and that could be bound a moment ago.
func Free(host string) (int, error) {
	lo, hi := candidates()
	for range 2000 {
		port := lo + rand.IntN(hi-lo)
		f, err := claim("port", port)
		if err != nil {
			return 0, err
		}
		if f == nil {
			continue // someone else's
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			f.Close() // in use by something that does not claim
			continue
		}
		l.Close()
		claims.Lock()
		claims.files = append(claims.files, f)
		claims.Unlock()
		return port, nil
	}
	return 0, errors.New("testport: no free port after 2000 tries")
}

// candidates is the range ports are drawn from: below the ephemeral range
// (read from the kernel) and above the well-known and registered ports
// servers on a test machine tend to use.
func candidates() (lo, hi int) {
	ephemeral := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				ephemeral = n
			}
		}
	}
	lo = 20000
	if ephemeral-lo < 4096 {
		// An unusual ephemeral range: fall back to a range of our own
		// and rely on the bind check.
		return 40000, 60000
	}
	return lo, ephemeral
}

// claim takes the lock file kind-n, or returns nil if another holder
// has it.
func claim(kind string, n int) (*os.File, error) {
	dir := filepath.Join(os.TempDir(), "ebbfs-testport")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("testport: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, kind+"-"+strconv.Itoa(n)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("testport: %w", err)
	}
	// flock belongs to the open file: a second open of the same file, in
	// this process or another, cannot take it while this one is held.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("testport: flock: %w", err)
	}
	return f, nil
}

// Number claims a number in [1, n] of the given kind, unique across
// processes until release is called or the process ends: tests that make
// network namespaces use it to pick names and subnets that no other
// running test uses.
func Number(kind string, n int) (num int, release func(), err error) {
	for range 20 * n {
		num = 1 + rand.IntN(n)
		f, err := claim(kind, num)
		if err != nil {
			return 0, nil, err
		}
		if f != nil {
			return num, func() { f.Close() }, nil
		}
	}
	return 0, nil, fmt.Errorf("testport: no free %s number in 1..%d", kind, n)
}
