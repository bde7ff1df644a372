package fileutil

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ResidentPages counts the pages of the first n bytes of the file at path
// that the page cache holds (mincore(2) of a mapping of them).
func ResidentPages(path string, n int) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(m)
	vec := make([]byte, (n+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, e
	}
	k := 0
	for _, v := range vec {
		k += int(v & 1)
	}
	return k, nil
}
