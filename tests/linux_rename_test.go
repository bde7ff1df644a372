package tests

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"ebbfs.dev/ebbfs/internal/testutil"
	"golang.org/x/sys/unix"
)

// listingInos lists dir in one readdir pass and returns name -> inode.
func listingInos(dir string) (map[string]uint64, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(int(f.Fd()), buf)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		b := buf[:n]
		for len(b) > 0 {
			d := (*unix.Dirent)(unsafe.Pointer(&b[0]))
			name := direntName(d)
			if name != "." && name != ".." {
				out[name] = d.Ino
			}
			b = b[d.Reclen:]
		}
	}
}

// direntName is a dirent's name.
func direntName(d *unix.Dirent) string {
	var b []byte
	for _, c := range d.Name {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// TestRenameExchangeOnReplica: renameat2 with RENAME_NOREPLACE refuses an
// existing name and RENAME_EXCHANGE swaps two names on the writer, as on
// ext4; a replica applying the exchanges sees both names swap in one
// step: no listing it serves ever shows one name without the other, or
// both naming the same file.
func TestRenameExchangeOnReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("d/x"), []byte("X"))
	writeFile(t, e.path("d/y"), []byte("Y"))
	err := unix.Renameat2(unix.AT_FDCWD, e.path("d/x"), unix.AT_FDCWD, e.path("d/y"), unix.RENAME_NOREPLACE)
	if !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("RENAME_NOREPLACE onto an existing name: %v, want EEXIST", err)
	}
	e.mustEbbfs("flush")
	r := e.sameStore()
	rp := r.mount("--read-only")
	testutil.Eventually(t, 10*time.Second, "both names on the replica", func() bool {
		return fileIs(r.path("d/x"), []byte("X")) && fileIs(r.path("d/y"), []byte("Y"))
	})
	first, err := listingInos(r.path("d"))
	if err != nil || len(first) != 2 || first["x"] == first["y"] {
		t.Fatalf("replica listing: %v, %v", first, err)
	}
	a, b := first["x"], first["y"]

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	listings := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			l, err := listingInos(r.path("d"))
			mu.Lock()
			listings++
			ok := err == nil && len(l) == 2 && ((l["x"] == a && l["y"] == b) || (l["x"] == b && l["y"] == a))
			if !ok && len(bad) < 10 {
				bad = append(bad, fmt.Sprintf("%v (err %v)", l, err))
			}
			mu.Unlock()
		}
	}()
	const swaps = 21
	for range swaps {
		if err := unix.Renameat2(unix.AT_FDCWD, e.path("d/x"), unix.AT_FDCWD, e.path("d/y"), unix.RENAME_EXCHANGE); err != nil {
			t.Fatalf("RENAME_EXCHANGE: %v", err)
		}
		e.mustEbbfs("flush")
	}
	// An odd number of swaps: x holds Y and y holds X, on both.
	if got := readFile(t, e.path("d/x")); string(got) != "Y" {
		t.Fatalf("writer's x after %d exchanges: %q", swaps, got)
	}
	testutil.Eventually(t, 10*time.Second, "the last exchange on the replica", func() bool {
		return fileIs(r.path("d/x"), []byte("Y")) && fileIs(r.path("d/y"), []byte("X"))
	})
	close(stop)
	wg.Wait()
	t.Logf("%d replica listings during %d exchanges", listings, swaps)
	if len(bad) > 0 {
		t.Fatalf("the replica served listings with the exchange half applied: %v", bad)
	}
	rp.stop()
	p.stop()
}
