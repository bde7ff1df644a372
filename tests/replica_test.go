package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/internal/testutil"
)

func fileIs(p string, want []byte) bool {
	got, err := os.ReadFile(p)
	return err == nil && bytes.Equal(got, want)
}

func gone(p string) bool {
	_, err := os.Lstat(p)
	return errors.Is(err, os.ErrNotExist)
}

// TestReplicaFollowsWriter: a replica with its own cache directory follows
// the writer from the store alone. New, rewritten, renamed and deleted
// files show on the replica's mount with the kernel's caches on (a file
// read once is read again after the writer rewrote it); a file held open
// keeps reading; every write operation on the replica fails with EROFS;
// its status shows the journal it serves and its lag.
func TestReplicaFollowsWriter(t *testing.T) {
	t.Parallel()
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	e := newEnv(t)
	e.init()
	p := e.mount()
	writeFile(t, e.path("a"), []byte("first"))
	fsyncFile(t, e.path("a"))
	r := e.sameStore()
	rp := r.mount("--read-only")
	if got := readFile(t, r.path("a")); string(got) != "first" {
		t.Fatalf("replica reads %q", got)
	}

	// A new file, fsynced on the writer.
	data := randBytes(t, 300<<10)
	writeFile(t, e.path("b"), data)
	fsyncFile(t, e.path("b"))
	testutil.Eventually(t, time.Minute, "new file on the replica", func() bool { return fileIs(r.path("b"), data) })

	// Held open on the replica while the writer rewrites it.
	held, err := os.Open(r.path("b"))
	if err != nil {
		t.Fatal(err)
	}
	// Rewritten: the replica's cached pages and size must go.
	data2 := randBytes(t, 200<<10)
	writeFile(t, e.path("b"), data2)
	fsyncFile(t, e.path("b"))
	testutil.Eventually(t, time.Minute, "rewritten file on the replica", func() bool { return fileIs(r.path("b"), data2) })
	buf := make([]byte, 4096)
	if _, err := held.ReadAt(buf, 0); err != nil {
		t.Fatalf("a file open on the replica stopped reading: %v", err)
	}
	held.Close()

	// Renamed and deleted.
	if err := os.Rename(e.path("a"), e.path("a2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("d/c"), []byte("in a directory"))
	e.mustEbbfs("flush")
	testutil.Eventually(t, time.Minute, "rename on the replica", func() bool { return gone(r.path("a")) && fileIs(r.path("a2"), []byte("first")) })
	testutil.Eventually(t, time.Minute, "new directory on the replica", func() bool { return fileIs(r.path("d/c"), []byte("in a directory")) })
	if err := os.Remove(e.path("a2")); err != nil {
		t.Fatal(err)
	}
	e.mustEbbfs("flush")
	testutil.Eventually(t, time.Minute, "delete on the replica", func() bool { return gone(r.path("a2")) })

	// Every write fails with EROFS.
	erofs := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s on the replica: %v, want EROFS", what, err)
		}
	}
	_, err = os.Create(r.path("new"))
	erofs("create", err)
	_, err = os.OpenFile(r.path("b"), os.O_WRONLY, 0)
	erofs("open for writing", err)
	erofs("truncate", os.Truncate(r.path("b"), 0))
	erofs("unlink", os.Remove(r.path("b")))
	erofs("rename", os.Rename(r.path("b"), r.path("b3")))
	erofs("mkdir", os.Mkdir(r.path("e"), 0o755))
	erofs("chmod", os.Chmod(r.path("b"), 0o600))
	erofs("setxattr", syscall.Setxattr(r.path("b"), "user.x", []byte("1"), 0))
	erofs("symlink", os.Symlink("b", r.path("s")))
	if !fileIs(r.path("b"), data2) {
		t.Fatal("a refused write changed the replica's file")
	}

	// Status: the journal it serves and its lag.
	st := r.mustEbbfs("status", "--json")
	var s struct {
		Extra struct {
			Replica *struct {
				Served  uint64  `json:"served_seq"`
				Lag     float64 `json:"lag_seconds"`
				Follows bool    `json:"follows"`
			} `json:"replica"`
		} `json:"extra"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &s); err != nil || s.Extra.Replica == nil {
		t.Fatalf("replica status: %v\n%s", err, st.stdout)
	}
	if rs := s.Extra.Replica; !rs.Follows || rs.Served == 0 || rs.Lag > 10 {
		t.Fatalf("replica status %+v", *rs)
	}
	rp.stop()
	p.stop()
}

// TestReplicaStaleness measures how soon a replica on the S3 test server
// sees what the writer fsynced: 200 probes, each a small write + fsync on
// the writer and a poll of the replica's mount. Every probe must become
// visible; p50/p99/max are reported (the target, p99 <= 2 s with the
// default poll interval, is a benchmark figure, not asserted here).
func TestReplicaStaleness(t *testing.T) {
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	srv := s3test.Start(t)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "stale", srv.AccessKey, srv.SecretKey))
	e.init()
	p := e.mount()
	r := e.sameStore()
	rp := r.mount("--read-only")
	probes := 200
	if testing.Short() {
		probes = 30
	}
	// Four probe streams at once (their own files), so that 200 probes
	// take a quarter of the time; each probe's latency is its own.
	const streams = 4
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for s := 0; s < streams; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := s; i < probes; i += streams {
				// A random pause, so that probes do not fall into step
				// with the replica's polls.
				time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
				want := []byte(fmt.Sprintf("probe %d at %s", i, time.Now().Format(time.RFC3339Nano)))
				name := fmt.Sprintf("s%d-p%d", s, i%5)
				if err := os.WriteFile(e.path(name), want, 0o644); err != nil {
					t.Error(err)
					return
				}
				f, err := os.OpenFile(e.path(name), os.O_RDWR, 0)
				if err == nil {
					err = f.Sync()
					f.Close()
				}
				if err != nil {
					t.Error(err)
					return
				}
				start := time.Now()
				for !fileIs(r.path(name), want) {
					if time.Since(start) > 30*time.Second {
						t.Errorf("probe %d not visible on the replica within 30s", i)
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
				mu.Lock()
				lat = append(lat, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	t.Logf("replica staleness over %d probes (S3, poll 1s): p50 %v, p99 %v, max %v",
		len(lat), pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	rp.stop()
	p.stop()
}
