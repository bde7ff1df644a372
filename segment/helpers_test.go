package segment

import (
	"bytes"
	"log/slog"
	"testing"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/segment/segtest"
)

// testKeys returns fresh keys without running the KDF.
func testKeys(tb testing.TB) *keys.Keys { return segtest.Keys(tb) }

// fixedKeys returns deterministic keys (fuzz seeds).
func fixedKeys() *keys.Keys {
	k := &keys.Keys{Pieced: true}
	for i := range k.UUID {
		k.UUID[i] = byte(i)
	}
	raw := bytes.Repeat([]byte{7}, 32)
	a, _ := keys.NewAEAD(raw)
	k.Data, k.Meta = a, a
	return k
}

func textExtent(seed uint64, n int) []byte { return segtest.TextExtent(seed, n) }

func randomExtent(n int) []byte { return segtest.RandomExtent(n) }

// buildSegment builds a segment of n extents alternating text and random
// data, returning the object bytes, the frame ids, the plaintexts and the
// pointers.
func buildSegment(tb testing.TB, k *keys.Keys, segID uint64, c Codec, n int) ([]byte, []FrameID, [][]byte, []Pointer) {
	tb.Helper()
	b := NewBuilder(k, segID, c)
	var ids []FrameID
	var plains [][]byte
	var ps []Pointer
	for i := 0; i < n; i++ {
		id := FrameID{Ino: 100 + uint64(i%3), Extent: uint64(i), Gen: 7}
		var p []byte
		if i%2 == 0 {
			p = textExtent(uint64(i), ExtentSize)
		} else {
			p = randomExtent(ExtentSize - i) // also exercises short extents
		}
		ps = append(ps, b.Add(id, p))
		ids = append(ids, id)
		plains = append(plains, p)
	}
	return b.Finish(), ids, plains, ps
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openTo decodes frame as the reader does, into a buffer of exactly
// plainLen bytes; inBuf reports that the plaintext landed in it.
func openTo(k *keys.Keys, id FrameID, frame []byte, plainLen int) (plain []byte, inBuf bool, err error) {
	dst := make([]byte, plainLen)
	out, err := decodeFrameTo(dst[:0:plainLen], k, id, frame, plainLen)
	if err != nil {
		return nil, false, err
	}
	return out, plainLen == 0 || &out[0] == &dst[0], nil
}
