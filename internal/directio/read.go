package directio

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Small reads past the page cache.
//
// A random read of a segment asks for a frame or one of its pieces: a few
// KiB that hardly ever start on a page boundary, so through the page cache
// it reads one page more than it needs from the disk, and adds pages to the
// cache that nothing reads again (the kernel caches the plaintext of the
// mounted file, not these bytes). Read with O_DIRECT, the same range
// rounded out to Align goes from the disk straight into the reader's
// buffer, sooner and for less CPU than through the page cache
// (bench/README.md, "Figures behind the code's constants"). A range the
// page cache holds
// whole (a frame written a moment ago) is still copied from it.

// A File is a second descriptor, in O_DIRECT mode, of a file another
// descriptor has open: the shared one stays fit for reads through the page
// cache, which O_DIRECT would take from its other users. It is opened on
// first use, through /proc/self/fd of the shared descriptor, so it reads
// the very file the shared one has open, whatever its path names now. The
// zero value is ready; Close it with the shared one.
type File struct {
	once sync.Once
	f    *os.File // nil: not opened, or the filesystem refuses O_DIRECT
}

// Read reads the n bytes at off of f's file into buf past the page cache
// and returns the slice holding them; false where it did not read them all
// (the page cache has them, buf is short of n+Slack bytes, O_DIRECT is
// refused, the file ends inside them, or either descriptor is closed), for
// the caller to read through f. A nil buf is a new buffer of the aligned
// range.
func (d *File) Read(f *os.File, off int64, n int, buf []byte) ([]byte, bool) {
	if n <= 0 || off < 0 || (buf != nil && len(buf) < n+Slack) {
		return nil, false
	}
	// The page cache first (a frame written a moment ago), so that a
	// file read only from it never opens its direct descriptor.
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, false
	}
	held := true
	if err := sc.Control(func(fd uintptr) { held = Cached(int(fd), off, int64(n)) }); err != nil || held {
		return nil, false
	}
	d.once.Do(func() { d.f = reopenDirect(f) })
	if d.f == nil {
		return nil, false
	}
	rc, err := d.f.SyscallConn()
	if err != nil {
		return nil, false
	}
	var data []byte
	var ok bool
	if err := rc.Control(func(fd uintptr) {
		if buf == nil {
			buf = alignedBuf(off, n)
		}
		data, ok = preadDirect(int(fd), off, n, buf)
	}); err != nil {
		return nil, false // closed under the read
	}
	return data, ok
}

// Close closes the O_DIRECT descriptor, if it was opened. It returns at
// once; the descriptor itself is closed once a Read in flight on it is
// done (os.File counts its users), and later Reads report false.
func (d *File) Close() {
	d.once.Do(func() {})
	if d.f != nil {
		_ = d.f.Close()
	}
}

// reopenDirect opens f's file again in O_DIRECT mode, or returns nil.
func reopenDirect(f *os.File) *os.File {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var df *os.File
	_ = rc.Control(func(fd uintptr) {
		df, err = os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDONLY|unix.O_DIRECT, 0)
	})
	if err != nil {
		return nil
	}
	return df
}

// alignedBuf returns a buffer for the Align-aligned range around
// [off, off+n), starting on a Align boundary where the allocator
// gives one (Go places every object whose size is a multiple of 4 KiB on
// one), with room to move up to one otherwise.
func alignedBuf(off int64, n int) []byte {
	start := off &^ (Align - 1)
	end := (off + int64(n) + Align - 1) &^ (Align - 1)
	b := make([]byte, int(end-start))
	if uintptr(unsafe.Pointer(&b[0]))&(Align-1) == 0 {
		return b
	}
	return make([]byte, int(end-start)+Align)
}

// preadDirect reads the Align-aligned range around [off, off+n) of
// fd, a descriptor in O_DIRECT mode, into buf at its first Align
// boundary, and returns the n bytes at off; false where buf is too short
// or fewer bytes came back (an error, or the file ends inside them).
func preadDirect(fd int, off int64, n int, buf []byte) ([]byte, bool) {
	start := off &^ (Align - 1)
	end := (off + int64(n) + Align - 1) &^ (Align - 1)
	skip := int(-uintptr(unsafe.Pointer(&buf[0])) & (Align - 1))
	if skip+int(end-start) > len(buf) {
		return nil, false
	}
	win := buf[skip : skip+int(end-start)]
	got := 0
	for got < len(win) {
		k, err := unix.Pread(fd, win[got:], start+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil || k == 0 {
			break // EOF inside the last block, or an error pread repeats
		}
		got += k
	}
	if head := int(off - start); got >= head+n {
		return win[head : head+n], true
	}
	return nil, false
}

// Slack is the room a ReadSpan buffer needs beyond the span: a direct
// read starts and ends on Align boundaries, in memory and in the file.
const Slack = 3 * Align

// Align is the alignment of a direct read's offset, length and memory:
// the largest logical block size of a disk (4 KiB).
const Align = 4096

// Min is the smallest span read directly: below it, a read is a
// random one, which the page cache serves better.
const Min = 256 << 10

// ReadDirect reads [off, off+n) of f into buf with O_DIRECT, unless the
// page cache holds all of it, and reports whether it did, and whether f
// is still fit for pread through the page cache.
func ReadDirect(f *os.File, off int64, n int, buf []byte) (data []byte, ok, usable bool) {
	fd := int(f.Fd())
	if Cached(fd, off, int64(n)) {
		return nil, false, true
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, false, true
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags|unix.O_DIRECT); err != nil {
		return nil, false, true // a filesystem without O_DIRECT
	}
	if data, ok := preadDirect(fd, off, n, buf); ok {
		return data, true, false
	}
	_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags)
	return nil, false, err == nil
}

// Cached reports whether the page cache holds every page of [off, off+n)
// of fd, as cachestat(2) counts them. Where the kernel lacks cachestat or
// refuses it, it answers yes: the page cache then serves every read, as it
// did before direct reads.
func Cached(fd int, off, n int64) bool {
	rng := struct{ off, len uint64 }{uint64(off), uint64(n)}
	var st struct{ cache, dirty, writeback, evicted, recentlyEvicted uint64 }
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, uintptr(fd), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
	if errno != 0 {
		return true
	}
	page := int64(os.Getpagesize())
	pages := uint64((off+n-1)/page - off/page + 1)
	return st.cache >= pages
}
