package objstore

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// writeNew writes data to f, a new empty file, from offset 0. An object of
// directMin bytes or more whose buffer starts on a spanAlign boundary (a
// segment, among others: the Go heap gives large buffers whole pages) has
// its whole blocks written with O_DIRECT and only its last partial block
// through the page cache. The disk then reads the bytes straight from data: no
// copy into the page cache, no writeback of it by the fsync that follows,
// and no second copy of every sealed byte crowding the page cache, where
// the mounted files' plaintext already is. A filesystem that refuses
// O_DIRECT, and any other buffer, get a plain write.
func writeNew(f *os.File, data []byte) error {
	n := len(data) &^ (spanAlign - 1)
	if n < directMin || uintptr(unsafe.Pointer(&data[0]))&(spanAlign-1) != 0 {
		_, err := f.Write(data)
		return err
	}
	fd := int(f.Fd())
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		_, err := f.Write(data)
		return err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags|unix.O_DIRECT); err != nil {
		_, err := f.Write(data) // a filesystem without O_DIRECT
		return err
	}
	done := 0
	var werr error
	for done < n {
		k, err := unix.Pwrite(fd, data[done:n], int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil || k <= 0 || k%spanAlign != 0 {
			werr = err
			if k > 0 {
				done += k
			}
			break
		}
		done += k
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags); err != nil {
		return err
	}
	if werr == unix.EINVAL && done == 0 {
		werr = nil // O_DIRECT accepted by open but not by write: write it buffered
	}
	if werr != nil {
		return werr
	}
	for done < len(data) {
		k, err := unix.Pwrite(fd, data[done:], int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if k == 0 {
			return unix.EIO
		}
		done += k
	}
	return nil
}
