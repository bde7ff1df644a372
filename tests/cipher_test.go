package tests

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// TestCipherFormats: a filesystem whose descriptor is format 1 (no cipher
// field, as every ebbfs before the cipher choice wrote it) mounts, takes
// writes and reads them back from the store alone with XChaCha20-Poly1305;
// one of format 2 (cipher recorded, made before pieced frames) does the
// same with XAES-256-GCM and keeps its frames whole; one of format 3 (made
// before patches) and one made by `ebbfs init` (format 4) record the
// cipher (by default XAES-256-GCM on a CPU with AES instructions) and seal
// raw extents in pieces. Under all, every
// frame in the store opens with the recorded cipher, the format does not
// change by use, and a flipped byte in each frame reads as EIO, not as
// other data.
func TestCipherFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		format int
		want   keys.Cipher
	}{
		{"format1-xchacha20", 1, keys.CipherXChaCha20Poly1305},
		{"format2-xaes", 2, keys.CipherXAES256GCM},
		{"format3-xchacha20", 3, keys.CipherXChaCha20Poly1305},
		{"init-default", keys.FormatVersion, keys.DefaultCipher()},
		{"init-cipher-xchacha20", keys.FormatVersion, keys.CipherXChaCha20Poly1305},
		{"init-cipher-xaes", keys.FormatVersion, keys.CipherXAES256GCM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			switch {
			case tc.format < keys.FormatVersion:
				writeOldDescriptor(t, e, tc.format, tc.want)
			case strings.HasPrefix(tc.name, "init-cipher-"):
				// ebbfs init --cipher: the choice is recorded and said.
				r := e.mustEbbfs("init", "--cipher", string(tc.want))
				if !strings.Contains(r.stdout, "cipher "+string(tc.want)) {
					t.Fatalf("ebbfs init --cipher %s printed %q", tc.want, r.stdout)
				}
			default:
				e.init()
			}
			d := readStoreDescriptor(t, e)
			if d.CipherOf() != tc.want {
				t.Fatalf("descriptor cipher %q, want %q", d.CipherOf(), tc.want)
			}
			if d.Format != tc.format {
				t.Fatalf("descriptor format %d, want %d", d.Format, tc.format)
			}
			t.Logf("descriptor format %d, cipher %s", d.Format, d.CipherOf())

			p := e.mount()
			big := randBytes(t, 3<<20+7)
			writeFile(t, e.path("big.bin"), big)
			fsyncFile(t, e.path("big.bin"))
			writeFile(t, e.path("small.txt"), []byte("sealed small file"))
			p.stop()
			if err := os.RemoveAll(e.cache); err != nil {
				t.Fatal(err)
			}
			if r := e.mustEbbfs("fsck"); !strings.Contains(r.stdout, "consistent") {
				t.Fatalf("fsck: %s", r)
			}
			p = e.mount()
			if got := readFile(t, e.path("big.bin")); !bytes.Equal(got, big) {
				t.Fatalf("big.bin differs after a restart from the store (%d bytes)", len(got))
			}
			if got := string(readFile(t, e.path("small.txt"))); got != "sealed small file" {
				t.Fatalf("small.txt = %q", got)
			}
			p.stop()
			if d2 := readStoreDescriptor(t, e); d2.Format != d.Format || d2.CipherOf() != tc.want {
				t.Fatalf("descriptor changed by use: format %d cipher %q", d2.Format, d2.CipherOf())
			}

			// Every frame opens under the recorded cipher; then flip one
			// byte in each.
			k, err := d.Unlock(testPassword)
			if err != nil {
				t.Fatal(err)
			}
			frames, pieced := 0, 0
			for _, path := range segmentFiles(t, e) {
				obj, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				ents := segmentEntries(t, k, path, obj)
				for _, en := range ents {
					fr := obj[en.Offset : uint64(en.Offset)+uint64(en.Length)]
					if segment.Pieced(len(fr), int(en.PlainLen)) {
						pieced++
					}
					if _, err := segment.DecodeFrame(k, en.ID(), fr, int(en.PlainLen)); err != nil {
						t.Fatalf("%s: frame %+v under %s: %v", path, en.ID(), k.Cipher, err)
					}
					fr[len(fr)/2] ^= 0x10
					frames++
				}
				if err := os.WriteFile(path, obj, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if frames < 3<<20/segment.ExtentSize {
				t.Fatalf("%d frames in the store for a 3 MiB file", frames)
			}
			// The random file's extents are raw: sealed in pieces in a
			// format-3 filesystem only.
			if (pieced > 0) != (d.Format >= 3) {
				t.Fatalf("format %d: %d of %d frames pieced", d.Format, pieced, frames)
			}
			if err := os.RemoveAll(e.cache); err != nil {
				t.Fatal(err)
			}
			p = e.mount()
			for _, name := range []string{"big.bin", "small.txt"} {
				_, err := os.ReadFile(e.path(name))
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("%s with every frame tampered: read error %v, want EIO", name, err)
				}
			}
			p.stop()
		})
	}
}

// writeOldDescriptor stores a descriptor of an older format under the test
// password, as the ebbfs of that format wrote it: format 1 names no cipher
// (XChaCha20-Poly1305), format 2 names the cipher and has no pieced frames,
// format 3 has pieced frames and no patches.
func writeOldDescriptor(t *testing.T, e *env, format int, c keys.Cipher) {
	t.Helper()
	d, _, err := keys.NewDescriptorCipher(testPassword, keys.DefaultKDF(), c)
	if err != nil {
		t.Fatal(err)
	}
	d.Format = format
	if format == 1 {
		d.Cipher = ""
	}
	b := d.Marshal()
	if _, err := keys.ParseDescriptor(b); err != nil {
		t.Fatalf("not a format-%d descriptor: %v\n%s", format, err, b)
	}
	st, err := objstore.NewLocal(e.store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(context.Background(), keys.DescriptorKey, b, objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
}

// segmentEntries returns the directory of the segment object obj (read
// from path) under keys k.
func segmentEntries(t *testing.T, k *keys.Keys, path string, obj []byte) []segment.DirEntry {
	t.Helper()
	f, err := segment.ParseFooter(obj[len(obj)-segment.FooterSize:])
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	ents, err := segment.ParseDirectory(k, f, obj[f.DirOffset:f.DirOffset+uint64(f.DirLen)])
	if err != nil {
		t.Fatalf("%s: directory under %s: %v", path, k.Cipher, err)
	}
	return ents
}

func readStoreDescriptor(t *testing.T, e *env) *keys.Descriptor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.store, keys.DescriptorKey))
	if err != nil {
		t.Fatal(err)
	}
	d, err := keys.ParseDescriptor(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// segmentFiles lists the segment objects of a local store.
func segmentFiles(t *testing.T, e *env) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(e.store, "segments"), func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no segments in the store")
	}
	return out
}

// TestInitRefusesUnknownCipher: a cipher name ebbfs does not know is a
// usage error that names the choices, and nothing is written.
func TestInitRefusesUnknownCipher(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.ebbfs("init", "--cipher", "aes-128-ecb")
	if r.code == 0 || !strings.Contains(r.stderr, "xaes-256-gcm") {
		t.Fatalf("init --cipher aes-128-ecb: exit %d, stderr %q; want an error naming the ciphers", r.code, r.stderr)
	}
	r = e.mustEbbfs("init")
	if !strings.Contains(r.stdout, "initialized") {
		t.Fatalf("init after the refused one printed %q", r.stdout)
	}
}

// TestUpgradeToPiecedFrames: `ebbfs upgrade` moves a format-2 filesystem
// to format 4 after checking the password (a wrong one changes nothing)
// and says what changes: pieced frames (3) and patched values (4), which
// older builds cannot read;
// data written before stays in whole frames and reads back, data written
// after the writer's restart is sealed in pieces, fsck finds it all
// consistent, and a second upgrade has nothing to do.
func TestUpgradeToPiecedFrames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := oldFilesystemWith(t, e, 2, keys.CipherXAES256GCM, 1<<20)

	desc := filepath.Join(e.store, keys.DescriptorKey)
	orig, err := os.ReadFile(desc)
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(e.dir, "password")
	pw, err := os.ReadFile(pwFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte("not the right password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.ebbfs("upgrade"); r.code != 3 || !strings.Contains(r.stderr, "wrong password") {
		t.Fatalf("upgrade with a wrong password: %s", r)
	}
	if now, _ := os.ReadFile(desc); !bytes.Equal(now, orig) {
		t.Fatal("a refused upgrade changed the descriptor")
	}
	if err := os.WriteFile(pwFile, pw, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.mustEbbfs("upgrade"); !strings.Contains(r.stdout, "from store format 2 to 4") ||
		!strings.Contains(r.stdout, "format 3: the writer seals") || !strings.Contains(r.stdout, "format 4: an extent's value may hold patches") ||
		!strings.Contains(r.stdout, "refuse to mount") {
		t.Fatalf("upgrade: %s", r)
	}
	d := readStoreDescriptor(t, e)
	if d.Format != keys.FormatVersion || d.CipherOf() != keys.CipherXAES256GCM {
		t.Fatalf("after upgrade: format %d, cipher %q", d.Format, d.CipherOf())
	}
	if r := e.mustEbbfs("upgrade"); !strings.Contains(r.stdout, "already at store format 4") {
		t.Fatalf("second upgrade: %s", r)
	}

	after := randBytes(t, 1<<20)
	p := e.mount()
	writeFile(t, e.path("after.bin"), after)
	fsyncFile(t, e.path("after.bin"))
	p.stop()
	k, err := d.Unlock(testPassword)
	if err != nil {
		t.Fatal(err)
	}
	pieced := map[uint64]int{} // inode -> pieced frames
	whole := map[uint64]int{}
	for _, path := range segmentFiles(t, e) {
		obj, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range segmentEntries(t, k, path, obj) {
			if en.PlainLen <= segment.PieceSize {
				continue
			}
			if segment.Pieced(int(en.Length), int(en.PlainLen)) {
				pieced[en.Ino]++
			} else {
				whole[en.Ino]++
			}
		}
	}
	if len(pieced) != 1 || len(whole) != 1 {
		t.Fatalf("large frames by inode: pieced %v, whole %v; want the file written after the upgrade pieced, the one before whole", pieced, whole)
	}
	for ino := range pieced {
		if whole[ino] != 0 {
			t.Fatalf("inode %d has both kinds of frames", ino)
		}
	}
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	if r := e.mustEbbfs("fsck", "--verify-data"); !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck: %s", r)
	}
	p = e.mount()
	if got := readFile(t, e.path("before.bin")); !bytes.Equal(got, before) {
		t.Fatal("before.bin differs after the upgrade")
	}
	if got := readFile(t, e.path("after.bin")); !bytes.Equal(got, after) {
		t.Fatal("after.bin differs")
	}
	p.stop()
}

// TestUpgradeFormat3ToPatches: `ebbfs upgrade` of a format-3 filesystem
// (pieced frames, made before patches) moves it to format 4 and names
// only what format 4 changes; what was stored before reads back, and fsck
// finds it consistent.
func TestUpgradeFormat3ToPatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := oldFilesystemWith(t, e, 3, keys.CipherXChaCha20Poly1305, 300<<10)
	r := e.mustEbbfs("upgrade")
	if !strings.Contains(r.stdout, "from store format 3 to 4") || strings.Contains(r.stdout, "format 3:") ||
		!strings.Contains(r.stdout, "format 4: an extent's value may hold patches") || !strings.Contains(r.stdout, "refuse to mount") {
		t.Fatalf("upgrade: %s", r)
	}
	if d := readStoreDescriptor(t, e); d.Format != 4 || d.CipherOf() != keys.CipherXChaCha20Poly1305 {
		t.Fatalf("after upgrade: format %d, cipher %q", d.Format, d.CipherOf())
	}
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	if r := e.mustEbbfs("fsck", "--verify-data"); !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck: %s", r)
	}
	p := e.mount()
	if got := readFile(t, e.path("before.bin")); !bytes.Equal(got, before) {
		t.Fatal("before.bin differs after the upgrade")
	}
	p.stop()
}

// oldFilesystemWith makes e a filesystem of an older descriptor format
// holding before.bin, size random bytes made durable, with no writer
// running; it returns them.
func oldFilesystemWith(t *testing.T, e *env, format int, c keys.Cipher, size int) []byte {
	t.Helper()
	writeOldDescriptor(t, e, format, c)
	before := randBytes(t, size)
	p := e.mount()
	writeFile(t, e.path("before.bin"), before)
	fsyncFile(t, e.path("before.bin"))
	p.stop()
	return before
}
