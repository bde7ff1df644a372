package tests

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// statfsUsed returns statfs's capacity and used bytes of dir.
func statfsUsed(t *testing.T, dir string) (capacity, used int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Blocks-st.Bfree) * st.Bsize
}

// fallocateFile runs fallocate(2) on path.
func fallocateFile(t *testing.T, path string, mode uint32, off, n int64) error {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return syscall.Fallocate(int(f.Fd()), mode, off, n)
}

// TestFallocateNeverPromisesMissingSpace: without a quota, df reports the
// nominal 1 PiB and a 2 PiB fallocate fails with ENOSPC, changing
// nothing, while a reservation that fits shows in df's used space; with
// a quota, reservations count in df, other files' writes find the space
// taken, and writing into the reservation never fails for want of room,
// also after a restart.
func TestFallocateNeverPromisesMissingSpace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	p := e.mount()
	capacity, used0 := statfsUsed(t, e.mnt)
	if capacity != 1<<50 {
		t.Fatalf("capacity without a quota: %d, want 1 PiB", capacity)
	}
	big := e.path("big")
	if err := fallocateFile(t, big, 0, 0, 2<<50); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fallocate of 2 PiB without a quota: %v, want ENOSPC", err)
	}
	if blocks, size := stBlocks(t, big); blocks != 0 || size != 0 {
		t.Fatalf("the refused fallocate left %d blocks, size %d", blocks, size)
	}
	if err := fallocateFile(t, big, 0, 0, 1<<40); err != nil {
		t.Fatalf("fallocate of 1 TiB without a quota: %v", err)
	}
	if _, used := statfsUsed(t, e.mnt); used-used0 != 1<<40 {
		t.Fatalf("df's used moved by %d after a 1 TiB fallocate, want 1 TiB", used-used0)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	if _, used := statfsUsed(t, e.mnt); used != used0 {
		t.Fatalf("df's used %d after deleting the reserved file, want %d", used, used0)
	}
	p.stop()

	// With a quota.
	e.writeConfig("\n[filesystem]\nmax_size = \"32MiB\"\n")
	p = e.mount()
	res := e.path("reserved")
	if err := fallocateFile(t, res, 0, 0, 24<<20); err != nil {
		t.Fatalf("fallocate 24 MiB under a 32 MiB quota: %v", err)
	}
	if _, used := statfsUsed(t, e.mnt); used < 24<<20 || used > 25<<20 {
		t.Fatalf("df's used after a 24 MiB fallocate under a quota: %d", used)
	}
	// A second reservation that does not fit fails up front (issue 40's
	// case: two fallocates that together pass the quota).
	if err := fallocateFile(t, e.path("second"), 0, 0, 24<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a second 24 MiB fallocate under a 32 MiB quota with 24 reserved: %v, want ENOSPC", err)
	}
	if fi, err := os.Stat(e.path("second")); err == nil && fi.Size() != 0 {
		t.Fatalf("the refused fallocate left a file of %d bytes", fi.Size())
	}
	_ = os.Remove(e.path("second"))
	if err := os.WriteFile(e.path("other"), randBytes(t, 12<<20), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("12 MiB into another file with 24 of 32 MiB reserved: %v, want ENOSPC", err)
	}
	if err := os.Remove(e.path("other")); err != nil {
		t.Fatal(err)
	}
	p.stop()
	p = e.mount()
	if _, used := statfsUsed(t, e.mnt); used < 24<<20 {
		t.Fatalf("df's used after a restart: %d, the reservation is not counted", used)
	}
	data := randBytes(t, 24<<20)
	f, err := os.OpenFile(res, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		t.Fatalf("writing into the 24 MiB reservation: %v", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	f.Close()
	// The data takes the reservation's place (the cleaner may still be
	// removing the pointers of the deleted file "other").
	testutil.Eventually(t, time.Minute, "df's used back to the filled reservation", func() bool {
		_, used := statfsUsed(t, e.mnt)
		return used >= 24<<20 && used <= 26<<20
	})
	p.stop()
}
