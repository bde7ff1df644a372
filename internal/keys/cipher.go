package keys

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/cpu"
)

// Cipher names the AEAD that seals a filesystem's frames, segment
// directories and metadata objects. It is recorded in the descriptor.
type Cipher string

const (
	// CipherXAES256GCM is XAES-256-GCM (c2sp.org/XAES-256-GCM), the
	// default for new filesystems on CPUs with AES and carry-less
	// multiply instructions.
	CipherXAES256GCM Cipher = "xaes-256-gcm"
	// CipherXChaCha20Poly1305 is XChaCha20-Poly1305: every filesystem
	// made before the cipher was recorded (format-1 descriptor), and the
	// default on CPUs without AES instructions.
	CipherXChaCha20Poly1305 Cipher = "xchacha20-poly1305"
)

// Valid reports whether c is a cipher this build implements.
func (c Cipher) Valid() bool {
	return c == CipherXAES256GCM || c == CipherXChaCha20Poly1305
}

// ParseCipher maps a name to a Cipher; "" and "auto" mean DefaultCipher().
func ParseCipher(s string) (Cipher, error) {
	switch c := Cipher(s); {
	case s == "" || s == "auto":
		return DefaultCipher(), nil
	case c.Valid():
		return c, nil
	}
	return "", fmt.Errorf("unknown cipher %q (want auto, %s or %s)", s, CipherXAES256GCM, CipherXChaCha20Poly1305)
}

// HasAESHardware reports whether Go's AES-GCM runs on hardware
// instructions here (AES rounds and carry-less multiply). Without them it
// uses a constant-time software AES several times slower than
// XChaCha20-Poly1305.
func HasAESHardware() bool {
	switch runtime.GOARCH {
	case "amd64":
		return cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ
	case "arm64":
		return cpu.ARM64.HasAES && cpu.ARM64.HasPMULL
	case "s390x":
		return cpu.S390X.HasAES && cpu.S390X.HasAESGCM
	}
	return false
}

// DefaultCipher is the cipher new filesystems get: XAES-256-GCM where the
// CPU has AES instructions, else XChaCha20-Poly1305.
func DefaultCipher() Cipher {
	if HasAESHardware() {
		return CipherXAES256GCM
	}
	return CipherXChaCha20Poly1305
}
