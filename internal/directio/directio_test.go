package directio

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// alignedBytes returns n random bytes starting on an Align boundary of
// memory.
func alignedBytes(n int, seed int64) []byte {
	raw := make([]byte, n+Align)
	at := int(-uintptr(unsafe.Pointer(&raw[0])) & (Align - 1))
	b := raw[at : at+n]
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// What WriteNew and WriteAt write (past the page cache or through it)
// reads back through a File beside an ordinary descriptor, or through that
// descriptor where the File declines, byte for byte.
func TestWriteThenReadBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := alignedBytes(2*Min+1234, 1)
	if err := WriteNew(f, want); err != nil {
		t.Fatal(err)
	}
	patch := alignedBytes(Min, 2)
	if err := WriteAt(f, patch, 3*Align+17); err != nil {
		t.Fatal(err)
	}
	copy(want[3*Align+17:], patch)
	var df File
	defer df.Close()
	buf := make([]byte, 64<<10+Slack)
	for _, c := range []struct{ off, n int }{{0, 4096}, {1, 5000}, {Min - 3, 40000}, {len(want) - 100, 100}} {
		got, ok := df.Read(f, int64(c.off), c.n, buf)
		if !ok { // the page cache holds it, or O_DIRECT is refused: read through f
			got = make([]byte, c.n)
			if _, err := f.ReadAt(got, int64(c.off)); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, want[c.off:c.off+c.n]) {
			t.Fatalf("[%d,+%d): other bytes than written (direct %v)", c.off, c.n, ok)
		}
	}
	if _, ok := df.Read(f, 0, 100, make([]byte, 100)); ok {
		t.Fatal("a read into a buffer without Slack bytes to spare went direct")
	}
}
