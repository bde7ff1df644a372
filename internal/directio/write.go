package directio

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WriteNew writes data to f, a new empty file, from offset 0. An object of
// Min bytes or more whose buffer starts on a Align boundary (a
// segment, among others: the Go heap gives large buffers whole pages) has
// its whole blocks written with O_DIRECT and only its last partial block
// through the page cache. The disk then reads the bytes straight from data: no
// copy into the page cache, no writeback of it by the fsync that follows,
// and no second copy of every sealed byte crowding the page cache, where
// the mounted files' plaintext already is. A filesystem that refuses
// O_DIRECT, and any other buffer, get a plain write.
func WriteNew(f *os.File, data []byte) error {
	return WriteAt(f, data, 0)
}

// WriteAt writes b at off of f as f.WriteAt would, but writes the
// whole blocks inside it, when they are Min bytes or more and their
// bytes in b start on a block boundary of memory too, with O_DIRECT: only
// the partial blocks at either end go through the page cache. The copy
// into the page cache is no small cost: for the disk cache it took more
// CPU than sealing the bytes (bench/README.md, "Figures behind the code's
// constants"). A filesystem that refuses
// O_DIRECT gets a plain write. f must not be in O_APPEND mode.
func WriteAt(f *os.File, b []byte, off int64) error {
	head := int(-off & (Align - 1))
	if head > len(b) {
		head = len(b)
	}
	done, err := writeDirect(f, b[head:], off+int64(head))
	if err != nil {
		return err
	}
	if head > 0 {
		if _, err := f.WriteAt(b[:head], off); err != nil {
			return err
		}
	}
	if rest := b[head+done:]; len(rest) > 0 {
		_, err = f.WriteAt(rest, off+int64(head+done))
	}
	return err
}

// writeDirect writes what it can of data's whole blocks to f at off, a
// block boundary, with O_DIRECT and returns how many bytes it wrote: 0
// where WriteAt writes it all through the page cache, and on a
// filesystem that refuses O_DIRECT. An error is one of the disk's (no
// space, I/O).
func writeDirect(f *os.File, data []byte, off int64) (int, error) {
	n := len(data) &^ (Align - 1)
	if n < Min || uintptr(unsafe.Pointer(&data[0]))&(Align-1) != 0 {
		return 0, nil
	}
	fd := int(f.Fd())
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return 0, nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags|unix.O_DIRECT); err != nil {
		return 0, nil
	}
	done := 0
	var werr error
	for done < n {
		k, err := unix.Pwrite(fd, data[done:n], off+int64(done))
		if err == unix.EINTR {
			continue
		}
		if k > 0 {
			done += k
		}
		if err != nil || k <= 0 || k%Align != 0 {
			// EINVAL before a byte: O_DIRECT taken by fcntl but not by
			// the write. A short write leaves the rest to the page cache.
			if err != unix.EINVAL || done > 0 {
				werr = err
			}
			break
		}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags); err != nil {
		return done, err
	}
	return done, werr
}
