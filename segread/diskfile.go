package segread

import (
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"ebbfs.dev/ebbfs/internal/directio"
	"golang.org/x/sys/unix"
)

// writeSegmentFrames writes b at off in the segment file data, in place
// (a run of 256 KiB or more past the page cache: directio.WriteAt),
// then appends recs to its index idx: a frame is listed only after its
// bytes were written (a crash may still lose them; the frame then fails
// authentication at its first read and is dropped).
func writeSegmentFrames(data, idx string, off int64, b []byte, recs []diskEntry) error {
	f, err := os.OpenFile(data, os.O_WRONLY|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(data), 0o700); err == nil {
			f, err = os.OpenFile(data, os.O_WRONLY|os.O_CREATE, 0o600)
		}
	}
	if err != nil {
		return err
	}
	err = directio.WriteAt(f, b, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	rb := make([]byte, 0, diskRecord*len(recs))
	for _, e := range recs {
		rb = binary.LittleEndian.AppendUint32(rb, e.off)
		rb = binary.LittleEndian.AppendUint32(rb, e.length)
	}
	x, err := os.OpenFile(idx, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = x.Write(rb)
	if cerr := x.Close(); err == nil {
		err = cerr
	}
	return err
}

// readSpanFile reads the n bytes at off of the cache file f into buf (nil:
// a buffer of its own) and returns the slice holding them, shorter where
// the file ends first. A span the page cache does not hold whole, a run of
// frames or a piece of one, is read past it through df, f's file kept
// open in O_DIRECT mode beside it (when buf, if given, has
// directio.Slack bytes to spare): so f, which other reads share, never
// turns O_DIRECT, and a file evicted meanwhile is still the one read.
// Anything else, and a span whose direct read fails, is read with f. An f
// closed under it (diskOpenFiles) gives os.ErrClosed.
func readSpanFile(f *os.File, df *directio.File, off int64, n int, buf []byte) ([]byte, error) {
	if df != nil {
		if data, ok := df.Read(f, off, n, buf); ok {
			return data, nil
		}
	}
	if len(buf) < n {
		buf = make([]byte, n)
	}
	return readAt(f, off, buf[:n])
}

// readAt reads len(dst) bytes at off of f into dst: fewer (the file ends)
// are returned as they are, for the caller's length check.
func readAt(f *os.File, off int64, dst []byte) ([]byte, error) {
	k, err := f.ReadAt(dst, off)
	if k == len(dst) {
		err = nil
	}
	if err != nil && k < len(dst) && errors.Is(err, io.EOF) {
		err = nil
	}
	return dst[:k], err
}

// punchHole frees [off, off+n) of the file at path, keeping its size.
func punchHole(path string, off, n int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// loadSegmentIndex returns the frames the index idx lists that its
// segment file data holds: inside the file and over no hole. Later
// records of an offset replace earlier ones.
func loadSegmentIndex(data, idx string, seg uint64) []diskEntry {
	rb, err := os.ReadFile(idx)
	if err != nil {
		return nil
	}
	f, err := os.Open(data)
	if err != nil {
		return nil
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil
	}
	byOff := map[uint32]uint32{}
	for i := 0; i+diskRecord <= len(rb); i += diskRecord {
		off := binary.LittleEndian.Uint32(rb[i:])
		n := binary.LittleEndian.Uint32(rb[i+4:])
		byOff[off] = n
	}
	var es []diskEntry
	for off, n := range byOff {
		if n == 0 || int64(off)+int64(n) > info.Size() {
			continue
		}
		// A hole inside the frame: evicted (punched) after it was listed.
		if h, err := unix.Seek(int(f.Fd()), int64(off), unix.SEEK_HOLE); err == nil && h < int64(off)+int64(n) {
			continue
		}
		es = append(es, diskEntry{seg: seg, off: off, length: n})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].off < es[j].off })
	return es
}

func parseShard(s string) (uint8, bool) {
	if len(s) != 2 || !lowerHex(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 8)
	return uint8(v), err == nil
}

// parseSegmentFileName parses "<16 hex>" (frames) or "<16 hex>.idx".
func parseSegmentFileName(s string) (seg uint64, idx bool, ok bool) {
	if strings.HasSuffix(s, ".idx") {
		s, idx = strings.TrimSuffix(s, ".idx"), true
	}
	if len(s) != 16 || !lowerHex(s) {
		return 0, false, false
	}
	seg, err := strconv.ParseUint(s, 16, 64)
	return seg, idx, err == nil
}

// isFrameFileName reports a name of the one-file-per-frame cache of an
// earlier version: <segment 16 hex>-<offset 8 hex>-<length 8 hex>.
func isFrameFileName(s string) bool {
	return len(s) == 16+1+8+1+8 && s[16] == '-' && s[25] == '-' &&
		lowerHex(s[:16]) && lowerHex(s[17:25]) && lowerHex(s[26:])
}

// lowerHex reports whether s is only lower-case hexadecimal digits.
func lowerHex(s string) bool { return strings.Trim(s, "0123456789abcdef") == "" }
