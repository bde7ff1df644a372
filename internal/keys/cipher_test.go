package keys

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
)

// A filesystem made before the cipher was recorded (format 1, by the code
// of commit d7187bd) still unlocks, reads as XChaCha20-Poly1305, and opens
// blobs that code sealed under both subkeys.
func TestFormat1DescriptorStillReads(t *testing.T) {
	b, err := os.ReadFile("testdata/format1-descriptor.json")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("cipher")) {
		t.Fatal("the format-1 fixture names a cipher")
	}
	d, err := ParseDescriptor(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.Format != 1 || d.CipherOf() != CipherXChaCha20Poly1305 {
		t.Fatalf("format %d, cipher %q", d.Format, d.CipherOf())
	}
	k, err := d.Unlock("old format password")
	if err != nil {
		t.Fatal(err)
	}
	if k.Cipher != CipherXChaCha20Poly1305 || k.Data.Cipher() != CipherXChaCha20Poly1305 || k.Pieced {
		t.Fatalf("keys cipher %q, pieced %v", k.Cipher, k.Pieced)
	}
	var sealed [][]byte
	lines, _ := os.ReadFile("testdata/format1-sealed.txt")
	for _, l := range strings.Split(string(lines), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		s, err := hex.DecodeString(l)
		if err != nil {
			t.Fatal(err)
		}
		sealed = append(sealed, s)
	}
	if len(sealed) != 2 {
		t.Fatalf("%d sealed blobs in the fixture", len(sealed))
	}
	if got, err := k.Data.Open([]byte("data aad"), sealed[0]); err != nil || string(got) != "sealed by the format-1 code" {
		t.Fatalf("data blob: %q, %v", got, err)
	}
	if got, err := k.Meta.Open([]byte("meta aad"), sealed[1]); err != nil || string(got) != "metadata of format 1" {
		t.Fatalf("meta blob: %q, %v", got, err)
	}
	// A re-wrap keeps format 1 and the cipher.
	nd, err := d.Rewrap("old format password", "new password!", cheapKDF())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(nd.Marshal(), []byte("cipher")) || nd.Format != 1 {
		t.Fatalf("re-wrapped format-1 descriptor changed: %s", nd.Marshal())
	}
}

func TestDescriptorRecordsCipher(t *testing.T) {
	for _, c := range []Cipher{CipherXAES256GCM, CipherXChaCha20Poly1305} {
		t.Run(string(c), func(t *testing.T) {
			d, k, err := NewDescriptorCipher("correct horse", cheapKDF(), c)
			if err != nil {
				t.Fatal(err)
			}
			m := d.Marshal()
			if d.Format != 4 || !bytes.Contains(m, []byte(`"cipher"`)) || !k.Pieced || !k.Patches {
				t.Fatalf("descriptor (pieced %v, patches %v): %s", k.Pieced, k.Patches, m)
			}
			d2, err := ParseDescriptor(m)
			if err != nil {
				t.Fatal(err)
			}
			k2, err := d2.Unlock("correct horse")
			if err != nil {
				t.Fatal(err)
			}
			if k2.Cipher != c || k.Cipher != c || k2.Meta.Cipher() != c || !k2.Pieced {
				t.Fatalf("cipher %q / %q, want %q", k2.Cipher, k.Cipher, c)
			}
			for _, pair := range [][2]*AEAD{{k.Data, k2.Data}, {k.Meta, k2.Meta}} {
				for _, size := range []int{0, 1, 4096, 32 << 10} {
					plain := bytes.Repeat([]byte{byte(size)}, size)
					sealed := pair[0].Seal([]byte("aad"), plain)
					if len(sealed) != size+Overhead {
						t.Fatalf("sealed %d bytes to %d", size, len(sealed))
					}
					got, err := pair[1].Open([]byte("aad"), sealed)
					if err != nil || !bytes.Equal(got, plain) {
						t.Fatalf("round trip of %d bytes: %v", size, err)
					}
					// In place, as the segment reader does.
					cp := append([]byte(nil), sealed...)
					got, err = pair[1].OpenTo(cp[NonceSize:NonceSize], []byte("aad"), cp)
					if err != nil || !bytes.Equal(got, plain) {
						t.Fatalf("in-place open of %d bytes: %v", size, err)
					}
				}
			}
			sealed := k.Data.Seal([]byte("a"), []byte("payload"))
			for i := range sealed {
				for _, bit := range []byte{0x01, 0x80} {
					cp := append([]byte(nil), sealed...)
					cp[i] ^= bit
					if _, err := k2.Data.Open([]byte("a"), cp); !errors.Is(err, ErrAuth) {
						t.Fatalf("flip %#x at byte %d accepted", bit, i)
					}
				}
			}
			if _, err := k2.Data.Open([]byte("b"), sealed); !errors.Is(err, ErrAuth) {
				t.Fatal("wrong AAD accepted")
			}
			if _, err := k2.Data.Open([]byte("a"), sealed[:len(sealed)-1]); !errors.Is(err, ErrAuth) {
				t.Fatal("truncated blob accepted")
			}
		})
	}
}

// One cipher's blob never opens under the other with the same key.
func TestCiphersAreDistinct(t *testing.T) {
	key := bytes.Repeat([]byte{9}, 32)
	x, _ := NewAEADCipher(key, CipherXAES256GCM)
	c, _ := NewAEADCipher(key, CipherXChaCha20Poly1305)
	if _, err := c.Open(nil, x.Seal(nil, []byte("p"))); !errors.Is(err, ErrAuth) {
		t.Fatal("an XAES blob opened as XChaCha20")
	}
	if _, err := x.Open(nil, c.Seal(nil, []byte("p"))); !errors.Is(err, ErrAuth) {
		t.Fatal("an XChaCha20 blob opened as XAES")
	}
}

func TestParseDescriptorCipherField(t *testing.T) {
	d, _, _ := NewDescriptorCipher("correct horse", cheapKDF(), CipherXAES256GCM)
	for name, edit := range map[string]func(*Descriptor){
		"unknown cipher":          func(d *Descriptor) { d.Cipher = "rot13" },
		"format 2 without cipher": func(d *Descriptor) { d.Cipher = "" },
		"format 1 with cipher":    func(d *Descriptor) { d.Format = 1 },
		"format 3 without cipher": func(d *Descriptor) { d.Format, d.Cipher = 3, "" },
		"format 4 without cipher": func(d *Descriptor) { d.Format, d.Cipher = 4, "" },
		"format 5":                func(d *Descriptor) { d.Format = 5 },
		"format 0":                func(d *Descriptor) { d.Format = 0 },
	} {
		nd := *d
		edit(&nd)
		if _, err := ParseDescriptor(nd.Marshal()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, _, err := NewDescriptorCipher("correct horse", cheapKDF(), "rot13"); err == nil {
		t.Error("NewDescriptorCipher accepted an unknown cipher")
	}
}

func TestParseCipherAndDefault(t *testing.T) {
	for in, want := range map[string]Cipher{
		"xaes-256-gcm":       CipherXAES256GCM,
		"xchacha20-poly1305": CipherXChaCha20Poly1305,
		"auto":               DefaultCipher(),
		"":                   DefaultCipher(),
	} {
		if got, err := ParseCipher(in); err != nil || got != want {
			t.Errorf("ParseCipher(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseCipher("aes"); err == nil {
		t.Error("ParseCipher accepted aes")
	}
	if HasAESHardware() != (DefaultCipher() == CipherXAES256GCM) {
		t.Error("DefaultCipher does not follow HasAESHardware")
	}
	_, k, _ := NewDescriptor("correct horse", cheapKDF())
	if k.Cipher != DefaultCipher() {
		t.Errorf("NewDescriptor chose %q", k.Cipher)
	}
	t.Logf("AES hardware: %v, default cipher %s", HasAESHardware(), DefaultCipher())
}

// A filesystem keeps its format: a format-2 descriptor (cipher recorded,
// no pieced frames) and a format-3 one (pieced frames, made before
// patches) still parse and unlock, with the features of their format
// only, and a re-wrap keeps the format: only `ebbfs upgrade` changes it.
func TestOlderDescriptorsKeepTheirFormat(t *testing.T) {
	for _, tc := range []struct {
		format int
		c      Cipher
		pieced bool
	}{{2, CipherXAES256GCM, false}, {3, CipherXChaCha20Poly1305, true}} {
		d, _, err := NewDescriptorCipher("correct horse", cheapKDF(), tc.c)
		if err != nil {
			t.Fatal(err)
		}
		d.Format = tc.format
		d2, err := ParseDescriptor(d.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		k, err := d2.Unlock("correct horse")
		if err != nil {
			t.Fatal(err)
		}
		if k.Pieced != tc.pieced || k.Patches || k.Cipher != tc.c {
			t.Fatalf("format %d: pieced %v, patches %v, cipher %q", tc.format, k.Pieced, k.Patches, k.Cipher)
		}
		nd, err := d2.Rewrap("correct horse", "battery staple", cheapKDF())
		if err != nil || nd.Format != tc.format {
			t.Fatalf("re-wrapped format-%d descriptor: format %d, %v", tc.format, nd.Format, err)
		}
	}
}

// Upgraded moves formats 1 to 3 to 4 with the same key and the cipher
// named, and the result unlocks with pieces and patches.
func TestDescriptorUpgraded(t *testing.T) {
	for _, tc := range []struct {
		format int
		c      Cipher
	}{{1, CipherXChaCha20Poly1305}, {2, CipherXAES256GCM}, {2, CipherXChaCha20Poly1305}, {3, CipherXAES256GCM}} {
		d, k, err := NewDescriptorCipher("correct horse", cheapKDF(), tc.c)
		if err != nil {
			t.Fatal(err)
		}
		d.Format = tc.format
		if tc.format == 1 {
			d.Cipher = ""
		}
		nd, err := ParseDescriptor(d.Upgraded().Marshal())
		if err != nil {
			t.Fatal(err)
		}
		k2, err := nd.Unlock("correct horse")
		if err != nil {
			t.Fatal(err)
		}
		if nd.Format != FormatVersion || nd.Cipher != tc.c || !k2.Pieced || !k2.Patches || nd.UUID != d.UUID {
			t.Fatalf("format %d upgraded: %s", tc.format, nd.Marshal())
		}
		sealed := k.Data.Seal([]byte("a"), []byte("same key"))
		if got, err := k2.Data.Open([]byte("a"), sealed); err != nil || string(got) != "same key" {
			t.Fatalf("format %d upgraded: the data key changed: %v", tc.format, err)
		}
	}
}

// UpgradeChanges names each format an upgrade passes, and that older
// builds refuse the result; nothing at the current format.
func TestUpgradeChanges(t *testing.T) {
	for from, want := range map[int][]string{
		1: {"format 3:", "format 4:", "refuse"},
		2: {"format 3:", "format 4:", "refuse"},
		3: {"format 4:", "refuse"},
	} {
		got := UpgradeChanges(from)
		if len(got) != len(want) {
			t.Fatalf("from %d: %q", from, got)
		}
		for i, w := range want {
			if !strings.Contains(got[i], w) {
				t.Errorf("from %d, line %d: %q lacks %q", from, i, got[i], w)
			}
		}
	}
	if got := UpgradeChanges(FormatVersion); len(got) != 0 {
		t.Fatalf("from the current format: %q", got)
	}
}
