// Package keys owns ebbfs key material: the descriptor object (ebbfs.fs)
// holding the Argon2id parameters and the wrapped 256-bit master key, the
// HKDF subkeys for data and metadata, and a small AEAD helper.
package keys

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/hkdf"
)

// DescriptorKey is the object key of the descriptor.
const DescriptorKey = "ebbfs.fs"

// FormatVersion is the descriptor format this build writes. Format 4 lets
// extent values hold patches (FORMAT.md, "Extent value"); format 3 lets
// the writer seal the frames of raw extents in pieces (FORMAT.md, "Pieced
// frame"); format 2 records the frame and metadata cipher ("cipher");
// format 1 (no cipher field) is XChaCha20-Poly1305 throughout. All four
// are read. A filesystem keeps the format it was made with until `ebbfs
// upgrade`, and gets a format's features only at that format: a build
// that knows an older format at most refuses the descriptor rather than
// meet a frame or a value it cannot read.
const FormatVersion = 4

// formatPieced is the descriptor format of filesystems made after pieced
// frames and before patches.
const formatPieced = 3

// formatCipher is the descriptor format of filesystems made after the
// cipher became a choice and before pieced frames.
const formatCipher = 2

// formatXChaCha is the descriptor format of filesystems made before the
// cipher became a choice: no cipher field, XChaCha20-Poly1305 throughout.
const formatXChaCha = 1

// MinPasswordLen is the shortest password accepted.
const MinPasswordLen = 8

// ErrWrongPassword means the password does not unwrap the master key.
var ErrWrongPassword = errors.New("wrong password: it does not unlock this filesystem's key")

// ErrShortPassword means the password is shorter than MinPasswordLen.
var ErrShortPassword = fmt.Errorf("password too short: at least %d characters are required", MinPasswordLen)

// ErrAuth means a sealed blob failed authentication (corrupt or tampered).
var ErrAuth = errors.New("authentication failed: data is corrupt or was tampered with")

// KDFParams are the Argon2id parameters recorded in the descriptor.
type KDFParams struct {
	Alg       string `json:"alg"` // "argon2id"
	Time      uint32 `json:"time"`
	MemoryKiB uint32 `json:"memory_kib"`
	Threads   uint8  `json:"threads"`
	Salt      []byte `json:"salt"`
}

// DefaultKDF returns the production Argon2id parameters with a fresh salt.
func DefaultKDF() KDFParams {
	salt := make([]byte, 16)
	mustRand(salt)
	return KDFParams{Alg: "argon2id", Time: 3, MemoryKiB: 64 * 1024, Threads: 2, Salt: salt}
}

// Descriptor is the plaintext JSON stored at ebbfs.fs.
type Descriptor struct {
	Format int      `json:"format"`
	UUID   [16]byte `json:"uuid"`
	// Cipher seals frames, segment directories and metadata objects
	// (both subkeys); absent in format 1, which means XChaCha20-Poly1305.
	// The wrapped key is always XChaCha20-Poly1305.
	Cipher     Cipher    `json:"cipher,omitempty"`
	KDF        KDFParams `json:"kdf"`
	WrappedKey []byte    `json:"wrapped_key"` // nonce || XChaCha20-Poly1305(master key)
}

// Keys are the unwrapped keys of an open filesystem.
type Keys struct {
	UUID   [16]byte
	Cipher Cipher
	// Pieced: the filesystem is format 3, whose writer seals the frames
	// of raw extents over 4 KiB in pieces. Every build that reads format 3
	// reads pieced frames in any filesystem.
	Pieced bool
	// Patches: the filesystem is format 4, whose extent values may hold
	// patches (a base frame and frames of parts of the extent). Only then
	// may a writer store one; every build that reads format 4 reads
	// patched values in any filesystem.
	Patches bool
	Data    *AEAD // frames and segment directories
	Meta    *AEAD // journal, manifests, SSTs, lease-free metadata objects
}

func mustRand(b []byte) {
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		panic("keys: system random source failed: " + err.Error())
	}
}

func kek(password string, p KDFParams) ([]byte, error) {
	if p.Alg != "argon2id" {
		return nil, fmt.Errorf("descriptor: unknown kdf %q", p.Alg)
	}
	if p.Time == 0 || p.Time > 100 || p.MemoryKiB < 8 || p.MemoryKiB > 4<<20 || p.Threads == 0 || len(p.Salt) < 8 {
		return nil, errors.New("descriptor: invalid kdf parameters")
	}
	return argon2.IDKey([]byte(password), p.Salt, p.Time, p.MemoryKiB, p.Threads, 32), nil
}

func wrapAAD(uuid [16]byte) []byte { return append([]byte("ebbfs-key-v1"), uuid[:]...) }

// NewDescriptor makes a fresh filesystem identity: uuid, random master key
// wrapped under password, sealing with DefaultCipher(). It returns the
// descriptor and the unwrapped keys.
func NewDescriptor(password string, kdf KDFParams) (*Descriptor, *Keys, error) {
	return NewDescriptorCipher(password, kdf, DefaultCipher())
}

// NewDescriptorCipher is NewDescriptor with a chosen cipher. The
// descriptor is at FormatVersion and names the cipher.
func NewDescriptorCipher(password string, kdf KDFParams, c Cipher) (*Descriptor, *Keys, error) {
	if len(password) < MinPasswordLen {
		return nil, nil, ErrShortPassword
	}
	if !c.Valid() {
		return nil, nil, fmt.Errorf("unknown cipher %q (want %s or %s)", c, CipherXAES256GCM, CipherXChaCha20Poly1305)
	}
	d := &Descriptor{Format: FormatVersion, Cipher: c, KDF: kdf}
	mustRand(d.UUID[:])
	master := make([]byte, 32)
	mustRand(master)
	k, err := kek(password, kdf)
	if err != nil {
		return nil, nil, err
	}
	a, _ := newAEAD(k)
	d.WrappedKey = a.Seal(wrapAAD(d.UUID), master)
	ks, err := derive(d.UUID, master, c, FormatVersion)
	return d, ks, err
}

// Marshal encodes the descriptor for storage.
func (d *Descriptor) Marshal() []byte {
	b, _ := json.MarshalIndent(d, "", "  ")
	return append(b, '\n')
}

// ParseDescriptor decodes a stored descriptor.
func ParseDescriptor(b []byte) (*Descriptor, error) {
	var d Descriptor
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("descriptor %s is malformed: %w", DescriptorKey, err)
	}
	switch d.Format {
	case formatXChaCha:
		if d.Cipher != "" {
			return nil, fmt.Errorf("descriptor %s has format 1 and a cipher field: %w", DescriptorKey, errMalformed)
		}
	case formatCipher, formatPieced, FormatVersion:
		if !d.Cipher.Valid() {
			return nil, fmt.Errorf("descriptor %s names cipher %q; this build knows %s and %s", DescriptorKey, d.Cipher, CipherXAES256GCM, CipherXChaCha20Poly1305)
		}
	default:
		return nil, fmt.Errorf("descriptor %s has format %d; this build reads formats 1 to %d", DescriptorKey, d.Format, FormatVersion)
	}
	return &d, nil
}

var errMalformed = errors.New("malformed")

// CipherOf returns the cipher d's filesystem seals with.
func (d *Descriptor) CipherOf() Cipher {
	if d.Cipher == "" {
		return CipherXChaCha20Poly1305
	}
	return d.Cipher
}

// Unlock unwraps the master key with password and derives the subkeys.
func (d *Descriptor) Unlock(password string) (*Keys, error) {
	master, err := d.unwrap(password)
	if err != nil {
		return nil, err
	}
	return derive(d.UUID, master, d.CipherOf(), d.Format)
}

func (d *Descriptor) unwrap(password string) ([]byte, error) {
	k, err := kek(password, d.KDF)
	if err != nil {
		return nil, err
	}
	a, _ := newAEAD(k)
	master, err := a.Open(wrapAAD(d.UUID), d.WrappedKey)
	if err != nil {
		return nil, ErrWrongPassword
	}
	return master, nil
}

// Rewrap returns a copy of d whose master key is wrapped under newPassword
// with fresh KDF parameters. Data is untouched.
func (d *Descriptor) Rewrap(oldPassword, newPassword string, kdf KDFParams) (*Descriptor, error) {
	if len(newPassword) < MinPasswordLen {
		return nil, ErrShortPassword
	}
	master, err := d.unwrap(oldPassword)
	if err != nil {
		return nil, err
	}
	k, err := kek(newPassword, kdf)
	if err != nil {
		return nil, err
	}
	a, _ := newAEAD(k)
	nd := *d
	nd.KDF = kdf
	nd.WrappedKey = a.Seal(wrapAAD(d.UUID), master)
	return &nd, nil
}

// Upgraded returns a copy of d at FormatVersion: the same key, salt and
// cipher (now named, if d is format 1). A filesystem whose descriptor is
// upgraded gets the features of the new format from its writer's next
// start; what it stored before stays as it is, and every build that reads
// the new format reads it.
func (d *Descriptor) Upgraded() *Descriptor {
	nd := *d
	nd.Format, nd.Cipher = FormatVersion, d.CipherOf()
	return &nd
}

// UpgradeChanges says, one line a format, what moving a filesystem of
// descriptor format from to FormatVersion changes for its writer and for
// the builds that can mount it (nothing when from is current).
func UpgradeChanges(from int) []string {
	var out []string
	if from < formatPieced {
		out = append(out, "format 3: the writer seals extents of data that does not compress in 4 KiB pieces, so that small random reads fetch and decrypt only what they need")
	}
	if from < FormatVersion {
		out = append(out, "format 4: an extent's value may hold patches (frames of parts of the extent beside its base frame), and the writer stores a write into part of an extent as only the bytes written, and a punch or written zeroes there as no bytes (docs/PATCHES.md)")
		out = append(out, fmt.Sprintf("builds that do not know format %d (every build before patched extents) refuse to mount the filesystem from then on", FormatVersion))
	}
	return out
}

// derive makes the keys of a filesystem of descriptor format format.
func derive(uuid [16]byte, master []byte, c Cipher, format int) (*Keys, error) {
	var err error
	sub := func(info string) *AEAD {
		k := make([]byte, 32)
		r := hkdf.New(sha256.New, master, uuid[:], []byte(info))
		if _, rerr := io.ReadFull(r, k); rerr != nil {
			panic("keys: hkdf: " + rerr.Error())
		}
		a, aerr := NewAEADCipher(k, c)
		if aerr != nil {
			err = aerr
		}
		return a
	}
	ks := &Keys{UUID: uuid, Cipher: c, Pieced: format >= formatPieced, Patches: format >= FormatVersion, Data: sub("ebbfs data v1"), Meta: sub("ebbfs meta v1")}
	if err != nil {
		return nil, err
	}
	return ks, nil
}

// AEAD seals and opens blobs with the filesystem's cipher (XAES-256-GCM or
// XChaCha20-Poly1305) and a random 24-byte nonce stored in front of the
// ciphertext. Both ciphers have the same nonce and tag sizes, so a sealed
// blob's length does not depend on the cipher.
type AEAD struct {
	cipher Cipher
	key    []byte
	xaes   *xaes // CipherXAES256GCM
}

// Overhead is the number of bytes Seal adds (nonce + tag).
const Overhead = chacha20poly1305.NonceSizeX + chacha20poly1305.Overhead

// NonceSize is the length of the nonce that starts a sealed blob.
const NonceSize = chacha20poly1305.NonceSizeX

// newAEAD is an XChaCha20-Poly1305 AEAD (key wrapping, format-1 data).
func newAEAD(key []byte) (*AEAD, error) {
	return NewAEADCipher(key, CipherXChaCha20Poly1305)
}

// NewAEAD wraps a raw 32-byte key for XChaCha20-Poly1305 (tests and
// benchmarks).
func NewAEAD(key []byte) (*AEAD, error) { return newAEAD(key) }

// NewAEADCipher wraps a raw 32-byte key for cipher c.
func NewAEADCipher(key []byte, c Cipher) (*AEAD, error) {
	if len(key) != 32 {
		return nil, errors.New("keys: key must be 32 bytes")
	}
	switch c {
	case CipherXChaCha20Poly1305:
		return &AEAD{cipher: c, key: key}, nil
	case CipherXAES256GCM:
		x, err := newXAES(key)
		if err != nil {
			return nil, err
		}
		return &AEAD{cipher: c, key: key, xaes: x}, nil
	}
	return nil, fmt.Errorf("keys: unknown cipher %q", c)
}

// Cipher returns the AEAD's cipher.
func (a *AEAD) Cipher() Cipher { return a.cipher }

// Seal returns nonce || ciphertext || tag.
func (a *AEAD) Seal(aad, plain []byte) []byte {
	return a.SealTo(nil, aad, plain)
}

// SealTo appends nonce || ciphertext || tag to dst.
func (a *AEAD) SealTo(dst, aad, plain []byte) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, NonceSize)...)
	mustRand(dst[n:])
	nonce := dst[n : n+NonceSize]
	if a.xaes != nil {
		return a.xaes.Seal(dst, nonce, plain, aad)
	}
	c, _ := chacha20poly1305.NewX(a.key)
	return c.Seal(dst, nonce, plain, aad)
}

// Open authenticates and decrypts a blob made by Seal. Any failure is ErrAuth.
func (a *AEAD) Open(aad, sealed []byte) ([]byte, error) {
	return a.OpenTo(nil, aad, sealed)
}

// OpenTo is Open appending the plaintext to dst. With dst =
// sealed[NonceSize:NonceSize] it decrypts in place.
func (a *AEAD) OpenTo(dst, aad, sealed []byte) ([]byte, error) {
	if len(sealed) < Overhead {
		return nil, ErrAuth
	}
	var out []byte
	var err error
	if a.xaes != nil {
		out, err = a.xaes.Open(dst, sealed[:NonceSize], sealed[NonceSize:], aad)
	} else {
		c, _ := chacha20poly1305.NewX(a.key)
		out, err = c.Open(dst, sealed[:NonceSize], sealed[NonceSize:], aad)
	}
	if err != nil {
		return nil, ErrAuth
	}
	return out, nil
}
