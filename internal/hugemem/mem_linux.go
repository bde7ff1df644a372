package hugemem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeSize is the size and alignment of a transparent huge page (x86-64,
// and arm64 with 4 KiB pages).
const hugeSize = 2 << 20

// alloc maps n bytes starting on a huge-page boundary and asks for huge
// pages there (a hint: with THP off they are small), and reports whether
// it did; where the kernel refuses the mapping, it returns a buffer of the
// Go heap.
func alloc(n int) ([]byte, bool) {
	m, err := unix.Mmap(-1, 0, n+hugeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, n), false
	}
	skip := (hugeSize - int(uintptr(unsafe.Pointer(&m[0]))%hugeSize)) % hugeSize
	b := m[skip : skip+n : skip+n]
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return b, true
}

// release returns the pages of b, a buffer alloc mapped, to the kernel;
// b stays mapped and reads as zeroes.
func release(b []byte) {
	_ = unix.Madvise(b, unix.MADV_DONTNEED)
}
