package keys

import (
	"bytes"
	"errors"
	"testing"
)

func cheapKDF() KDFParams {
	p := DefaultKDF()
	p.Time, p.MemoryKiB, p.Threads = 1, 64, 1
	return p
}

func TestUnlockRoundTripAndWrongPassword(t *testing.T) {
	d, k, err := NewDescriptor("correct horse", cheapKDF())
	if err != nil {
		t.Fatal(err)
	}
	d2, err := ParseDescriptor(d.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	k2, err := d2.Unlock("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	sealed := k.Data.Seal([]byte("aad"), []byte("secret"))
	if got, err := k2.Data.Open([]byte("aad"), sealed); err != nil || string(got) != "secret" {
		t.Fatalf("unlocked keys differ: %q, %v", got, err)
	}
	if _, err := d2.Unlock("wrong horse"); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("wrong password: %v", err)
	}
}

func TestSubkeysAreSeparate(t *testing.T) {
	_, k, err := NewDescriptor("correct horse", cheapKDF())
	if err != nil {
		t.Fatal(err)
	}
	sealed := k.Data.Seal(nil, []byte("x"))
	if _, err := k.Meta.Open(nil, sealed); !errors.Is(err, ErrAuth) {
		t.Fatalf("metadata key opened a data blob: %v", err)
	}
}

func TestRewrapKeepsMasterKey(t *testing.T) {
	d, k, _ := NewDescriptor("correct horse", cheapKDF())
	nd, err := d.Rewrap("correct horse", "battery staple", cheapKDF())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nd.Unlock("correct horse"); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("old password still works: %v", err)
	}
	k2, err := nd.Unlock("battery staple")
	if err != nil {
		t.Fatal(err)
	}
	sealed := k.Meta.Seal(nil, []byte("m"))
	if got, err := k2.Meta.Open(nil, sealed); err != nil || !bytes.Equal(got, []byte("m")) {
		t.Fatalf("re-wrapped key differs: %v", err)
	}
	if _, err := d.Rewrap("correct horse", "short", cheapKDF()); !errors.Is(err, ErrShortPassword) {
		t.Fatalf("short new password: %v", err)
	}
}

func TestAEADRejectsTampering(t *testing.T) {
	_, k, _ := NewDescriptor("correct horse", cheapKDF())
	sealed := k.Data.Seal([]byte("a"), []byte("payload"))
	for i := range sealed {
		c := append([]byte(nil), sealed...)
		c[i] ^= 0x40
		if _, err := k.Data.Open([]byte("a"), c); !errors.Is(err, ErrAuth) {
			t.Fatalf("flip at %d accepted", i)
		}
	}
	if _, err := k.Data.Open([]byte("b"), sealed); !errors.Is(err, ErrAuth) {
		t.Fatal("wrong AAD accepted")
	}
	if _, err := k.Data.Open(nil, sealed[:10]); !errors.Is(err, ErrAuth) {
		t.Fatal("short blob accepted")
	}
}

func TestParseDescriptorRejects(t *testing.T) {
	for _, in := range []string{"", "{", `{"format":2}`, "null"} {
		if _, err := ParseDescriptor([]byte(in)); err == nil {
			t.Fatalf("accepted %q", in)
		}
	}
	d, _, _ := NewDescriptor("correct horse", cheapKDF())
	d.KDF.Alg = "scrypt"
	if _, err := d.Unlock("correct horse"); err == nil || errors.Is(err, ErrWrongPassword) {
		t.Fatalf("unknown kdf: %v", err)
	}
}

func FuzzParseDescriptor(f *testing.F) {
	d, _, _ := NewDescriptor("correct horse", cheapKDF())
	f.Add(d.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDescriptor(b)
		if err == nil {
			_, _ = d.Unlock("correct horse")
		}
	})
}
