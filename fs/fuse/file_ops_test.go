package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"golang.org/x/sys/unix"
)

func readAll(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return b
}

func statOf(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

func TestCreateWriteReadOverwriteTruncate(t *testing.T) {
	m := mount(t)
	p := m.path("f")

	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320000 bytes, several requests
	if n, err := f.Write(want); err != nil || n != len(want) {
		t.Fatalf("write: %d %v", n, err)
	}
	if _, err := f.WriteAt([]byte("XYZ"), 100); err != nil {
		t.Fatal(err)
	}
	copy(want[100:], "XYZ")
	got := make([]byte, len(want)+10)
	n, err := f.ReadAt(got, 0)
	if err != io.EOF || n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("read back: n=%d err=%v equal=%v", n, err, bytes.Equal(got[:n], want))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); !os.IsExist(err) {
		t.Fatalf("O_EXCL on existing file: %v", err)
	}

	st := statOf(t, p)
	if st.Size != int64(len(want)) || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		t.Fatalf("stat: size %d mode %o nlink %d", st.Size, st.Mode, st.Nlink)
	}
	if st.Uid != uint32(os.Geteuid()) || st.Gid != uint32(os.Getegid()) {
		t.Fatalf("owner %d:%d, want caller %d:%d", st.Uid, st.Gid, os.Geteuid(), os.Getegid())
	}
	if st.Mode&0o777 != 0o644&^uint32(umask()) {
		t.Fatalf("mode %o, want %o", st.Mode&0o777, 0o644&^umask())
	}

	// Truncate down, then up: the grown part reads as zeroes.
	if err := os.Truncate(p, 10); err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, p); !bytes.Equal(b, want[:10]) {
		t.Fatalf("after truncate(10): %q", b)
	}
	if err := os.Truncate(p, 5000); err != nil {
		t.Fatal(err)
	}
	b := readAll(t, p)
	if len(b) != 5000 || !bytes.Equal(b[:10], want[:10]) || !bytes.Equal(b[10:], make([]byte, 4990)) {
		t.Fatalf("after truncate(5000): len %d head %q", len(b), b[:10])
	}

	// ftruncate through an open handle.
	f, err = os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3); err != nil {
		t.Fatal(err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 3 {
		t.Fatalf("fstat after ftruncate: %v %v", fi, err)
	}
	f.Close()

	// O_TRUNC on open.
	if err := os.WriteFile(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, p); string(b) != "new" {
		t.Fatalf("after O_TRUNC rewrite: %q", b)
	}
}

func umask() uint32 {
	old := unix.Umask(0)
	unix.Umask(old)
	return uint32(old)
}

func TestAppend(t *testing.T) {
	m := mount(t)
	p := m.path("log")
	if err := os.WriteFile(p, []byte("start\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a1, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	a2, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	for i := range 3 {
		if _, err := fmt.Fprintf(a1, "a%d\n", i); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(a2, "b%d\n", i); err != nil {
			t.Fatal(err)
		}
	}
	// A write at an explicit offset through a plain handle, then more
	// appends: they must land after it.
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("Z"), 100); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := a1.WriteString("end\n"); err != nil {
		t.Fatal(err)
	}
	want := "start\na0\nb0\na1\nb1\na2\nb2\n"
	want += string(make([]byte, 100-len(want))) + "Z" + "end\n"
	if got := string(readAll(t, p)); got != want {
		t.Fatalf("appended file:\n%q\nwant\n%q", got, want)
	}
}

func TestConcurrentHandles(t *testing.T) {
	m := mount(t)
	p := m.path("shared")
	const writers, chunk = 4, 64 << 10
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			buf := bytes.Repeat([]byte{byte('a' + i)}, chunk)
			if _, err := f.WriteAt(buf, int64(i*chunk)); err != nil {
				errs <- err
				return
			}
			got := make([]byte, chunk)
			if _, err := f.ReadAt(got, int64(i*chunk)); err != nil || !bytes.Equal(got, buf) {
				errs <- fmt.Errorf("writer %d read back mismatch: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b := readAll(t, p)
	if len(b) != writers*chunk {
		t.Fatalf("size %d", len(b))
	}
	for i := range writers {
		if !bytes.Equal(b[i*chunk:(i+1)*chunk], bytes.Repeat([]byte{byte('a' + i)}, chunk)) {
			t.Fatalf("region %d wrong", i)
		}
	}
}

func TestUnlinkedOpenFileStaysReadable(t *testing.T) {
	m := mount(t)
	p := m.path("tmp")
	if err := os.WriteFile(p, []byte("still here"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("lstat after unlink: %v", err)
	}
	if _, err := f.WriteAt([]byte("!"), 10); err != nil {
		t.Fatalf("write to unlinked open file: %v", err)
	}
	got := make([]byte, 20)
	n, _ := f.ReadAt(got, 0)
	if string(got[:n]) != "still here!" {
		t.Fatalf("read unlinked open file: %q", got[:n])
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
		t.Fatalf("fstat unlinked: nlink %d err %v", st.Nlink, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// The last release lets the engine delete the orphan. RELEASE is sent
	// asynchronously after close(2), so poll.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := m.e.GetAttr(context.Background(), st.Ino)
		if errors.Is(err, ebbfs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan inode %d still there after last close: %v", st.Ino, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The name is free for a new file.
	if err := os.WriteFile(p, []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, p); string(b) != "other" {
		t.Fatalf("new file: %q", b)
	}
}

func TestFsync(t *testing.T) {
	m := mount(t)
	f, err := os.Create(m.path("durable"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("data"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatalf("fdatasync: %v", err)
	}
	d, err := os.Open(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync dir: %v", err)
	}
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatalf("syncfs: %v", err)
	}
}

func TestFallocateAndPunchHole(t *testing.T) {
	m := mount(t)
	p := m.path("sparse")
	const blk = 64 << 10
	data := bytes.Repeat([]byte{0xAB}, 3*blk)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, blk, blk); err != nil {
		t.Fatalf("punch hole: %v", err)
	}
	got := make([]byte, 3*blk)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	copy(data[blk:2*blk], make([]byte, blk))
	if !bytes.Equal(got, data) {
		t.Fatal("punched range does not read back as zeroes (or neighbours changed)")
	}
	if fi, _ := f.Stat(); fi.Size() != 3*blk {
		t.Fatalf("size after punch %d", fi.Size())
	}

	// KEEP_SIZE preallocation leaves the size alone; mode 0 extends it.
	if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 3*blk, blk); err != nil {
		t.Fatalf("fallocate keep size: %v", err)
	}
	if fi, _ := f.Stat(); fi.Size() != 3*blk {
		t.Fatalf("size after KEEP_SIZE allocate %d", fi.Size())
	}
	if err := unix.Fallocate(fd, 0, 3*blk, blk); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	if fi, _ := f.Stat(); fi.Size() != 4*blk {
		t.Fatalf("size after allocate %d", fi.Size())
	}
	tail := make([]byte, blk)
	if _, err := f.ReadAt(tail, 3*blk); err != nil || !bytes.Equal(tail, make([]byte, blk)) {
		t.Fatalf("allocated range not zero: %v", err)
	}

	err = unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE, 0, blk)
	wantErrno(t, "fallocate ZERO_RANGE", err, unix.EOPNOTSUPP)
	err = unix.Fallocate(fd, unix.FALLOC_FL_COLLAPSE_RANGE, 0, blk)
	wantErrno(t, "fallocate COLLAPSE_RANGE", err, unix.EOPNOTSUPP)
}

func TestSeekDataHole(t *testing.T) {
	m := mount(t)
	p := m.path("holes")
	const mib = 1 << 20
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{2}, 4096), 4*mib); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 * mib); err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	seek := func(off int64, whence int) (int64, error) { return unix.Seek(fd, off, whence) }

	if off, err := seek(0, unix.SEEK_DATA); err != nil || off != 0 {
		t.Fatalf("SEEK_DATA 0: %d %v", off, err)
	}
	hole, err := seek(0, unix.SEEK_HOLE)
	if err != nil || hole < 4096 || hole > 4*mib {
		t.Fatalf("SEEK_HOLE 0: %d %v", hole, err)
	}
	data, err := seek(hole, unix.SEEK_DATA)
	if err != nil || data < hole || data > 4*mib {
		t.Fatalf("SEEK_DATA %d: %d %v", hole, data, err)
	}
	if h, err := seek(4*mib, unix.SEEK_HOLE); err != nil || h < 4*mib+4096 || h > 8*mib {
		t.Fatalf("SEEK_HOLE 4MiB: %d %v", h, err)
	}
	// The implicit hole at end of file.
	if h, err := seek(6*mib, unix.SEEK_HOLE); err != nil || h != 6*mib {
		t.Fatalf("SEEK_HOLE in trailing hole: %d %v", h, err)
	}
	_, err = seek(6*mib, unix.SEEK_DATA)
	wantErrno(t, "SEEK_DATA in trailing hole", err, unix.ENXIO)
	_, err = seek(9*mib, unix.SEEK_DATA)
	wantErrno(t, "SEEK_DATA past EOF", err, unix.ENXIO)
	_, err = seek(9*mib, unix.SEEK_HOLE)
	wantErrno(t, "SEEK_HOLE past EOF", err, unix.ENXIO)
}

func TestCopyFileRange(t *testing.T) {
	m := mount(t)
	src := bytes.Repeat([]byte("copy me "), 50000)
	if err := os.WriteFile(m.path("src"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(m.path("src"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(m.path("dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var total int
	for total < len(src) {
		roff, woff := int64(total), int64(total)
		n, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, len(src)-total, 0)
		if err != nil {
			t.Fatalf("copy_file_range: %v", err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != len(src) {
		t.Fatalf("copied %d of %d", total, len(src))
	}
	if got := readAll(t, m.path("dst")); !bytes.Equal(got, src) {
		t.Fatal("copy differs")
	}
}
