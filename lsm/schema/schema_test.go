package schema

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

func TestInodeRoundTrip(t *testing.T) {
	in := Inode{Mode: 0o100644, Uid: 1, Gid: 2, Nlink: 3, Rdev: 4, Size: 5, Blocks: 6, Atime: -7, Mtime: 8, Ctime: 9, Gen: 10, Parent: 11}
	v1 := in.Marshal()
	out, err := UnmarshalInode(v1)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	if _, err := UnmarshalInode(v1[:10]); err == nil {
		t.Fatal("short record accepted")
	}
	if len(v1) != 77 || v1[0] != 1 {
		t.Fatalf("an inode without reservations is a %d-byte version %d record, want the 77-byte version 1", len(v1), v1[0])
	}

	// Reservations (fallocate) make a version 2 record.
	in.Reserved = []ExtentSpan{{0, 4}, {10, 1 << 40}}
	v2 := in.Marshal()
	if len(v2) != 77+2+32 || v2[0] != 2 || !bytes.Equal(v2[1:77], v1[1:]) {
		t.Fatalf("version 2 record: %x", v2)
	}
	if out, err = UnmarshalInode(v2); err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("version 2 round trip: %+v, %v", out, err)
	}
	bad := func(name string, b []byte) {
		t.Helper()
		if _, err := UnmarshalInode(b); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	bad("truncated ranges", v2[:len(v2)-1])
	bad("trailing bytes", append(append([]byte(nil), v2...), 0))
	bad("v1 with a tail", append(append([]byte(nil), v1...), 0, 0))
	bad("v2 without ranges", append(append([]byte{2}, v1[1:]...), 0, 0))
	for _, r := range [][]ExtentSpan{{{4, 4}}, {{5, 3}}, {{0, 4}, {4, 8}}, {{10, 20}, {0, 4}}} {
		x := in
		x.Reserved = r
		bad("ranges "+fmt.Sprint(r), x.Marshal())
	}
	bad("version 4", append([]byte{4}, v1[1:]...))

	// A smaller extent size makes a version 3 record, with or without
	// reservations.
	for _, res := range [][]ExtentSpan{nil, {{0, 4}, {10, 1 << 40}}} {
		x := in
		x.Reserved, x.ExtentShift = res, 12
		v3 := x.Marshal()
		if len(v3) != 77+3+16*len(res) || v3[0] != 3 || v3[77] != 12 || !bytes.Equal(v3[1:77], v1[1:]) {
			t.Fatalf("version 3 record: %x", v3)
		}
		if out, err = UnmarshalInode(v3); err != nil || !reflect.DeepEqual(out, x) || out.Shift() != 12 {
			t.Fatalf("version 3 round trip: %+v, %v", out, err)
		}
		for _, sh := range []byte{0, 11, 15, 16} {
			b := append([]byte(nil), v3...)
			b[77] = sh
			bad(fmt.Sprintf("extent shift %d", sh), b)
		}
		bad("version 3 truncated", v3[:len(v3)-1])
	}
	x := in
	x.Reserved, x.ExtentShift = nil, MaxExtentShift
	if v := x.Marshal(); !bytes.Equal(v, v1) {
		t.Fatalf("the default extent size made %x, want the version 1 record", v)
	}
	if x.Shift() != 15 || (&Inode{}).Shift() != 15 {
		t.Fatal("the default extent shift is not 15")
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

func TestKeyInode(t *testing.T) {
	for _, k := range [][]byte{InodeKey(7), DirentKey(7, "n"), ExtentKey(7, 3), TombstoneKey(7), OrphanKey(7),
		XattrKey(7, "user.x"), SymlinkKey(7), RangeTombKey(7, 1, 2)} {
		if ino, ok := KeyInode(k); !ok || ino != 7 {
			t.Errorf("KeyInode(%q) = %d, %v; want 7", k, ino, ok)
		}
	}
	for _, k := range [][]byte{CounterKey(7), {PFsSystem, 'x'}, {PInode}, nil} {
		if _, ok := KeyInode(k); ok {
			t.Errorf("KeyInode(%q) belongs to an inode", k)
		}
	}
}
