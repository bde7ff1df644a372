package keys

import (
	"bytes"
	"errors"
	"testing"
)

// The messages of a Sealer share their first 12 nonce bytes and no other,
// open with the plain AEAD (every message stands alone) and with an
// Opener moving between groups, and fail on any change, under both
// ciphers.
func TestSealerGroups(t *testing.T) {
	for _, c := range []Cipher{CipherXAES256GCM, CipherXChaCha20Poly1305} {
		t.Run(string(c), func(t *testing.T) {
			key := bytes.Repeat([]byte{0x5a}, 32)
			a, err := NewAEADCipher(key, c)
			if err != nil {
				t.Fatal(err)
			}
			type msg struct{ aad, plain, sealed []byte }
			var msgs []msg
			for g := 0; g < 3; g++ {
				s := a.NewSealer()
				var first []byte
				for i := 0; i < 4; i++ {
					plain := bytes.Repeat([]byte{byte(16*g + i)}, 100*i+1)
					aad := []byte{byte(g), byte(i)}
					sealed := s.SealTo([]byte("head"), aad, plain)[4:]
					if len(sealed) != len(plain)+Overhead {
						t.Fatalf("sealed %d bytes of %d", len(sealed), len(plain))
					}
					if first == nil {
						first = sealed
					} else {
						if !bytes.Equal(sealed[:sharedNonce], first[:sharedNonce]) {
							t.Fatal("two messages of one group do not share the nonce prefix")
						}
						if bytes.Equal(sealed[sharedNonce:NonceSize], first[sharedNonce:NonceSize]) {
							t.Fatal("two messages of one group have the same nonce")
						}
					}
					msgs = append(msgs, msg{aad, plain, sealed})
				}
				if g > 0 && bytes.Equal(first[:sharedNonce], msgs[0].sealed[:sharedNonce]) {
					t.Fatal("two groups share a nonce prefix")
				}
			}
			o := a.NewOpener()
			for _, m := range msgs {
				got, err := a.Open(m.aad, m.sealed)
				if err != nil || !bytes.Equal(got, m.plain) {
					t.Fatalf("AEAD.Open of a group message: %v", err)
				}
				got, err = o.OpenTo(nil, m.aad, m.sealed)
				if err != nil || !bytes.Equal(got, m.plain) {
					t.Fatalf("Opener.OpenTo: %v", err)
				}
			}
			// Out of order, back to an earlier group: still right.
			for i := len(msgs) - 1; i >= 0; i -= 3 {
				if got, err := o.OpenTo(nil, msgs[i].aad, msgs[i].sealed); err != nil || !bytes.Equal(got, msgs[i].plain) {
					t.Fatalf("Opener.OpenTo out of order: %v", err)
				}
			}
			m := msgs[5]
			for _, bad := range []struct {
				name        string
				aad, sealed []byte
			}{
				{"wrong aad", []byte{9, 9}, m.sealed},
				{"flipped nonce tail", m.aad, flip(m.sealed, sharedNonce+3)},
				{"flipped nonce prefix", m.aad, flip(m.sealed, 2)},
				{"flipped ciphertext", m.aad, flip(m.sealed, NonceSize+1)},
				{"short", m.aad, m.sealed[:Overhead-1]},
			} {
				if _, err := o.OpenTo(nil, bad.aad, bad.sealed); !errors.Is(err, ErrAuth) {
					t.Fatalf("%s: %v, want ErrAuth", bad.name, err)
				}
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}

// TestOpenersShareDerivedKeys: a new Opener (one per read) finds the
// AES-GCM instance of a group another Opener derived, so a random read of
// one piece does not derive its group's key again; the kept instances are
// bounded, oldest out first, and a group whose instance was let go still
// opens.
func TestOpenersShareDerivedKeys(t *testing.T) {
	a, err := NewAEADCipher(bytes.Repeat([]byte{0x33}, 32), CipherXAES256GCM)
	if err != nil {
		t.Fatal(err)
	}
	seal := func() []byte {
		s := a.NewSealer()
		return s.SealTo(nil, []byte("aad"), []byte("piece"))
	}
	open := func(sealed []byte) *Opener {
		t.Helper()
		o := a.NewOpener()
		if got, err := o.OpenTo(nil, []byte("aad"), sealed); err != nil || string(got) != "piece" {
			t.Fatalf("open: %q, %v", got, err)
		}
		return &o
	}
	first := seal()
	if g1, g2 := open(first).gcm, open(first).gcm; g1 != g2 {
		t.Fatal("a second Opener derived the group's AES-GCM instance again")
	}
	for range gcmCacheSize {
		open(seal())
	}
	c := &a.xaes.opened
	c.mu.Lock()
	n := len(c.m)
	var p [sharedNonce]byte
	copy(p[:], first)
	_, kept := c.m[p]
	c.mu.Unlock()
	if n != gcmCacheSize || kept {
		t.Fatalf("%d instances kept (want %d), the oldest among them: %v", n, gcmCacheSize, kept)
	}
	open(first)
	bad := append([]byte(nil), first...)
	bad[len(bad)-1] ^= 1
	o := a.NewOpener()
	if _, err := o.OpenTo(nil, []byte("aad"), bad); !errors.Is(err, ErrAuth) {
		t.Fatalf("a damaged piece opened with a kept instance: %v", err)
	}
}
