package schema

import (
	"bytes"
	"testing"
)

func TestInodeRoundTrip(t *testing.T) {
	in := Inode{Mode: 0o100644, Uid: 1, Gid: 2, Nlink: 3, Rdev: 4, Size: 5, Blocks: 6, Atime: -7, Mtime: 8, Ctime: 9, Gen: 10, Parent: 11}
	out, err := UnmarshalInode(in.Marshal())
	if err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	if _, err := UnmarshalInode(in.Marshal()[:10]); err == nil {
		t.Fatal("short record accepted")
	}
}

func TestKeysSortNumerically(t *testing.T) {
	if bytes.Compare(ExtentKey(1, 255), ExtentKey(1, 256)) >= 0 || bytes.Compare(ExtentKey(1, 1<<40), ExtentKey(2, 0)) >= 0 {
		t.Fatal("extent keys do not sort by (ino, index)")
	}
	lo, hi := DirentPrefix(7)
	k := DirentKey(7, "name")
	if bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
		t.Fatal("dirent outside its directory's range")
	}
	p, n, err := ParseDirentKey(k)
	if err != nil || p != 7 || n != "name" {
		t.Fatalf("ParseDirentKey = %d %q %v", p, n, err)
	}
	ino, idx, err := ParseExtentKey(ExtentKey(3, 9))
	if err != nil || ino != 3 || idx != 9 {
		t.Fatalf("ParseExtentKey = %d %d %v", ino, idx, err)
	}
	if _, _, err := ParseExtentKey([]byte("e123")); err == nil {
		t.Fatal("malformed extent key accepted")
	}
}

func FuzzUnmarshal(f *testing.F) {
	in := Inode{Mode: 1}
	f.Add(in.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := UnmarshalInode(b); err == nil && !bytes.Equal(n.Marshal(), b) {
			t.Fatal("decode/encode mismatch")
		}
		_, _ = UnmarshalDirent(b)
		_, _, _ = ParseDirentKey(b)
		_, _, _ = ParseExtentKey(b)
	})
}
