package lsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"ebbfs.dev/ebbfs/internal/keys"
)

// Shipped table objects are encrypted in chunks so that a large file never
// needs one giant AEAD call and truncation, reordering or splicing of
// chunks is detected.
const (
	sstMagic        = "EBS1"
	sstHeaderLen    = 16 // magic(4) chunkSize u32 LE(4) plainLen u64 LE(8)
	sstChunkSize    = 1 << 20
	sstMinChunkSize = 1 << 12
	sstMaxChunkSize = 64 << 20
	sstMaxPlain     = 1 << 40
)

func sstChunkAAD(k *keys.Keys, object string, header []byte, idx uint64, last bool) []byte {
	a := aadFor(k, "sst", object)
	a = append(a, 0)
	a = append(a, header...)
	a = binary.BigEndian.AppendUint64(a, idx)
	if last {
		return append(a, 1)
	}
	return append(a, 0)
}

func sstChunks(plainLen uint64, chunk uint32) uint64 {
	if plainLen == 0 {
		return 1
	}
	return (plainLen + uint64(chunk) - 1) / uint64(chunk)
}

// sealSST encrypts a table file for the object named object.
func sealSST(k *keys.Keys, object string, plain []byte, chunk uint32) []byte {
	n := sstChunks(uint64(len(plain)), chunk)
	out := make([]byte, sstHeaderLen, sstHeaderLen+len(plain)+int(n)*keys.Overhead)
	copy(out, sstMagic)
	binary.LittleEndian.PutUint32(out[4:], chunk)
	binary.LittleEndian.PutUint64(out[8:], uint64(len(plain)))
	header := append([]byte(nil), out[:sstHeaderLen]...)
	for i := uint64(0); i < n; i++ {
		lo := i * uint64(chunk)
		hi := min(lo+uint64(chunk), uint64(len(plain)))
		out = k.Meta.SealTo(out, sstChunkAAD(k, object, header, i, i == n-1), plain[lo:hi])
	}
	return out
}

// openSST authenticates and decrypts a table object.
func openSST(k *keys.Keys, object string, sealed []byte) ([]byte, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, object, fmt.Sprintf(format, args...))
	}
	if len(sealed) < sstHeaderLen || string(sealed[:4]) != sstMagic {
		return nil, fail("bad table object header")
	}
	header := sealed[:sstHeaderLen]
	chunk := binary.LittleEndian.Uint32(header[4:])
	plainLen := binary.LittleEndian.Uint64(header[8:])
	if chunk < sstMinChunkSize || chunk > sstMaxChunkSize || plainLen > sstMaxPlain {
		return nil, fail("implausible chunk size %d or length %d", chunk, plainLen)
	}
	n := sstChunks(plainLen, chunk)
	if want := uint64(sstHeaderLen) + plainLen + n*keys.Overhead; uint64(len(sealed)) != want {
		return nil, fail("object is %d bytes, header implies %d (truncated or extended)", len(sealed), want)
	}
	out := make([]byte, 0, plainLen)
	rest := sealed[sstHeaderLen:]
	for i := uint64(0); i < n; i++ {
		size := min(uint64(chunk), plainLen-uint64(len(out))) + keys.Overhead
		var err error
		out, err = k.Meta.OpenTo(out, sstChunkAAD(k, object, header, i, i == n-1), rest[:size])
		if err != nil {
			return nil, fail("chunk %d: %v", i, err)
		}
		rest = rest[size:]
	}
	if len(rest) != 0 || uint64(len(out)) != plainLen {
		return nil, fail("length mismatch after decryption")
	}
	return out, nil
}

var errNoKeys = errors.New("lsm: Options.Keys with a Meta AEAD is required")
