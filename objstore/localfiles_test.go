package objstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fdsUnder returns the targets of this process's open file descriptors
// that lie under dir (deleted files included).
func fdsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") {
			out = append(out, target)
		}
	}
	return out
}

func putObject(t *testing.T, l *Local, key string, data []byte) {
	t.Helper()
	if _, err := l.Put(context.Background(), key, data, PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func readSmallOK(t *testing.T, l *Local, key string, off int64, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if err := l.ReadRange(context.Background(), key, off, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s at %d: read %q, want %q", key, off, got, want)
	}
}

// A small read of a segment object keeps its file open for the next one:
// the second read is served even after the object's name was taken away
// behind the store's back (which only another process would do).
func TestLocalKeepsSegmentFileOpen(t *testing.T) {
	root := t.TempDir()
	l, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	key := "segments/01/0000000000000001"
	putObject(t, l, key, []byte("0123456789abcdef"))
	readSmallOK(t, l, key, 2, []byte("234"))
	if n := l.files.open(); n != 1 {
		t.Fatalf("%d files kept open after a small read, want 1", n)
	}
	if err := os.Rename(l.path(key), filepath.Join(root, "elsewhere")); err != nil {
		t.Fatal(err)
	}
	readSmallOK(t, l, key, 10, []byte("abc"))
	// Reads outside the object are refused through a kept file too.
	if err := l.ReadRange(context.Background(), key, 14, make([]byte, 4)); err == nil {
		t.Fatal("a read past the object's end succeeded")
	}
	// Other keys and large reads open their file each time.
	putObject(t, l, "journal/1", []byte("j"))
	readSmallOK(t, l, "journal/1", 0, []byte("j"))
	big := bytes.Repeat([]byte{7}, localRandomRead+1)
	putObject(t, l, "segments/02/0000000000000002", big)
	readSmallOK(t, l, "segments/02/0000000000000002", 0, big)
	if n := l.files.open(); n != 1 {
		t.Fatalf("%d files kept open, want only the small segment read's", n)
	}
}

// This process's Delete closes the kept file at once, so the space comes
// back; its Put of the same key makes the next read see the new bytes.
func TestLocalForgetsFileOnDeleteAndPut(t *testing.T) {
	root := t.TempDir()
	l, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	key := "segments/03/0000000000000003"
	putObject(t, l, key, []byte("old bytes"))
	readSmallOK(t, l, key, 0, []byte("old"))
	putObject(t, l, key, []byte("new bytes"))
	readSmallOK(t, l, key, 0, []byte("new"))
	if err := l.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if fds := fdsUnder(t, root); len(fds) != 0 {
		t.Fatalf("after Delete, open files under the store: %v", fds)
	}
	if err := l.ReadRange(context.Background(), key, 0, make([]byte, 3)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read after Delete: %v, want ErrNotFound", err)
	}
	// DeleteMany too.
	putObject(t, l, key, []byte("again"))
	readSmallOK(t, l, key, 0, []byte("again"))
	if err := l.DeleteMany(context.Background(), []string{key}); err != nil {
		t.Fatal(err)
	}
	if fds := fdsUnder(t, root); len(fds) != 0 {
		t.Fatalf("after DeleteMany, open files under the store: %v", fds)
	}
}

// A kept file is closed within about twice openFilesTTL of its opening,
// even if nothing touches the store again: an object another process
// deleted gives its space back.
func TestLocalClosesIdleFiles(t *testing.T) {
	root := t.TempDir()
	l, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	key := "segments/04/0000000000000004"
	putObject(t, l, key, []byte("idle"))
	readSmallOK(t, l, key, 0, []byte("idle"))
	if err := os.Remove(l.path(key)); err != nil { // as another process would
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * openFilesTTL)
	for len(fdsUnder(t, root)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("files still open %v after the object was deleted: %v", 3*openFilesTTL, fdsUnder(t, root))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := l.files.open(); n != 0 {
		t.Fatalf("%d files listed as kept after the sweep", n)
	}
}

// Reads racing Deletes and Puts of the same keys never read a closed file
// and leave nothing open.
func TestLocalOpenFilesRace(t *testing.T) {
	root := t.TempDir()
	l, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"segments/05/0000000000000005", "segments/06/0000000000000006"}
	data := []byte("same bytes in every version")
	for _, k := range keys {
		putObject(t, l, k, data)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			buf := make([]byte, 4)
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := l.ReadRange(ctx, keys[i%2], 5, buf)
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Errorf("read: %v", err)
					return
				}
				if err == nil && string(buf) != "byte" {
					t.Errorf("read %q", buf)
					return
				}
			}
		}(i)
	}
	for i := 0; i < 200; i++ {
		k := keys[i%2]
		if err := l.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
		putObject(t, l, k, data)
	}
	close(stop)
	wg.Wait()
	for _, k := range keys {
		if err := l.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if fds := fdsUnder(t, root); len(fds) != 0 {
		t.Fatalf("open files under the store after deleting every object: %v", fds)
	}
}
