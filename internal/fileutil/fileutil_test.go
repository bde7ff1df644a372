package fileutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAtomicReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, data := range []string{"first version", "2"} {
		if err := WriteAtomic(p, []byte(data), Options{Durable: true}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("%d entries in the directory; temporary files left behind", len(ents))
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestWriteAtomicMkdirAll(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a", "b", "f")
	if err := WriteAtomic(p, []byte("x"), Options{}); err == nil {
		t.Fatal("wrote into a missing directory without MkdirAll")
	}
	if err := WriteAtomic(p, []byte("x"), Options{MkdirAll: true, TempPrefix: "tmp."}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "x" {
		t.Fatalf("read %q", got)
	}
}
