package main

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/nbd"
)

// fakeFS is an in-memory engineFS: a root with a .nbd directory and files.
type fakeFS struct {
	mu       sync.Mutex
	noDir    bool
	files    map[string]*fakeFile // in /.nbd/
	open     map[uint64]int
	barriers int
	punches  [][2]int64
	maxIO    int // largest Read/Write the fake does at once (short I/O)
}

type fakeFile struct {
	ino  uint64
	mode uint32
	data []byte
}

const fakeDirIno = 2

func newFakeFS() *fakeFS {
	return &fakeFS{files: map[string]*fakeFile{}, open: map[uint64]int{}, maxIO: 1000}
}

func (f *fakeFS) add(name string, mode uint32, size int) *fakeFile {
	ff := &fakeFile{ino: uint64(10 + len(f.files)), mode: mode, data: make([]byte, size)}
	f.files[name] = ff
	return ff
}

func (f *fakeFS) byIno(ino uint64) *fakeFile {
	for _, ff := range f.files {
		if ff.ino == ino {
			return ff
		}
	}
	return nil
}

func (f *fakeFS) Lookup(ctx context.Context, parent uint64, name string) (fs.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if parent == fs.RootIno && name == NBDDir && !f.noDir {
		return fs.Attr{Ino: fakeDirIno, Mode: fs.ModeDir | 0o755}, nil
	}
	if parent == fakeDirIno {
		if ff, ok := f.files[name]; ok {
			return fs.Attr{Ino: ff.ino, Mode: ff.mode, Size: uint64(len(ff.data))}, nil
		}
	}
	return fs.Attr{}, fs.ErrNotExist
}

func (f *fakeFS) ReadDir(ctx context.Context, ino uint64) ([]fs.DirEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fs.DirEntry
	for n, ff := range f.files {
		out = append(out, fs.DirEntry{Name: n, Ino: ff.ino, Mode: ff.mode & fs.ModeType})
	}
	return out, nil
}

func (f *fakeFS) GetAttr(ctx context.Context, ino uint64) (fs.Attr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ff := f.byIno(ino)
	if ff == nil {
		return fs.Attr{}, fs.ErrNotExist
	}
	return fs.Attr{Ino: ino, Mode: ff.mode, Size: uint64(len(ff.data))}, nil
}

func (f *fakeFS) Open(ctx context.Context, ino uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open[ino]++
	return nil
}

func (f *fakeFS) Release(ctx context.Context, ino uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open[ino]--
	return nil
}

func (f *fakeFS) Read(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ff := f.byIno(ino)
	if off >= int64(len(ff.data)) {
		return 0, nil
	}
	n := copy(p[:min(len(p), f.maxIO)], ff.data[off:])
	return n, nil
}

func (f *fakeFS) Write(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ff := f.byIno(ino)
	if ff.mode&0o200 == 0 {
		return 0, fs.ErrReadOnly
	}
	n := min(len(p), f.maxIO)
	if end := off + int64(n); end > int64(len(ff.data)) {
		ff.data = append(ff.data, make([]byte, end-int64(len(ff.data)))...)
	}
	copy(ff.data[off:], p[:n])
	return n, nil
}

func (f *fakeFS) Punch(ctx context.Context, ino uint64, off, length int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ff := f.byIno(ino)
	clear(ff.data[off : off+length])
	f.punches = append(f.punches, [2]int64{off, length})
	return nil
}

func (f *fakeFS) Barrier(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.barriers++
	return nil
}

func TestNBDBackend(t *testing.T) {
	ctx := context.Background()
	f := newFakeFS()
	f.add("disk0", fs.ModeRegular|0o644, 10000)
	f.add("ro", fs.ModeRegular|0o444, 100)
	f.add("sub", fs.ModeDir|0o755, 0)
	f.add("link", fs.ModeSymlink|0o777, 0)
	b := &nbdBackend{e: f}

	list, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int64{}
	for _, x := range list {
		names[x.Name] = x.Size
	}
	if len(names) != 2 || names["disk0"] != 10000 || names["ro"] != 100 {
		t.Fatalf("List = %+v, want only the regular files", list)
	}
	for _, bad := range []string{"missing", "sub", "link", "", ".", "..", "a/b", "../disk0"} {
		if _, err := b.Open(ctx, bad); !errors.Is(err, nbd.ErrNoSuchExport) {
			t.Errorf("Open(%q) = %v, want ErrNoSuchExport", bad, err)
		}
	}
	x, err := b.Open(ctx, "disk0")
	if err != nil {
		t.Fatal(err)
	}
	ino := f.files["disk0"].ino
	if f.open[ino] != 1 {
		t.Fatalf("export does not hold the file open: %d", f.open[ino])
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 300) // 4800 bytes: several short writes
	if err := x.WriteAt(ctx, data, 1234); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := x.ReadAt(ctx, got, 1234); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadAt after WriteAt: %v, equal=%v", err, bytes.Equal(got, data))
	}
	// Reading past the end of a file that shrank reads zeroes.
	tail := bytes.Repeat([]byte{0xff}, 3000)
	if err := x.ReadAt(ctx, tail, 9000); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tail[1000:], make([]byte, 2000)) {
		t.Fatal("past-EOF part of a read is not zero")
	}
	if err := x.Zero(ctx, 1234, 100, true); err != nil || len(f.punches) != 1 {
		t.Fatalf("Zero(mayTrim) = %v, punches %v", err, f.punches)
	}
	if err := x.Zero(ctx, 2000, 2500, false); err != nil || len(f.punches) != 1 {
		t.Fatalf("Zero(no hole) = %v, punches %v (must write, not punch)", err, f.punches)
	}
	if err := x.ReadAt(ctx, got, 1234); err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), data...)
	clear(want[:100])
	clear(want[2000-1234 : 4500-1234])
	if !bytes.Equal(got, want) {
		t.Fatal("zeroed ranges do not read as zeroes")
	}
	if err := x.Trim(ctx, 0, 10); err != nil || len(f.punches) != 2 {
		t.Fatalf("Trim = %v", err)
	}
	if err := x.Flush(ctx); err != nil || f.barriers != 1 {
		t.Fatalf("Flush = %v, barriers %d", err, f.barriers)
	}
	if n, err := x.Size(); err != nil || n != 10000 {
		t.Fatalf("Size = %d, %v", n, err)
	}
	x.Close()
	x.Close()
	if f.open[ino] != 0 {
		t.Fatalf("Close twice left open count %d", f.open[ino])
	}

	ro, err := b.Open(ctx, "ro")
	if err != nil {
		t.Fatal(err)
	}
	err = ro.WriteAt(ctx, []byte("x"), 0)
	if !errors.Is(err, syscall.EROFS) || !errors.Is(err, fs.ErrReadOnly) {
		t.Fatalf("write to read-only: %v, want EROFS wrapping fs.ErrReadOnly", err)
	}
	ro.Close()

	f.noDir = true
	if l, err := b.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List without /.nbd = %v, %v", l, err)
	}
	if _, err := b.Open(ctx, "disk0"); !errors.Is(err, nbd.ErrNoSuchExport) {
		t.Fatalf("Open without /.nbd = %v", err)
	}
}

func TestNBDErr(t *testing.T) {
	for in, want := range map[error]syscall.Errno{
		fs.ErrReadOnly: syscall.EROFS, fs.ErrInvalid: syscall.EINVAL,
		fs.ErrFileTooBig: syscall.EOVERFLOW, fs.ErrNotSupported: syscall.EOPNOTSUPP,
	} {
		if err := nbdErr(in); !errors.Is(err, want) || !errors.Is(err, in) {
			t.Errorf("nbdErr(%v) = %v, want %v", in, err, want)
		}
	}
	if nbdErr(nil) != nil {
		t.Error("nbdErr(nil) != nil")
	}
	plain := errors.New("boom")
	if err := nbdErr(plain); err != plain {
		t.Errorf("unknown error changed: %v", err)
	}
}
