package lsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"

	"ebbfs.dev/ebbfs/internal/keys"
)

// Object-key layout under meta/ (DESIGN section 2).
const (
	journalPrefix  = "meta/journal/"
	manifestPrefix = "meta/manifest/"
	sstPrefix      = "meta/sst/"
	leaseKey       = "writer.lease"
)

func journalKey(seq uint64) string  { return fmt.Sprintf("%s%016x", journalPrefix, seq) }
func manifestKey(seq uint64) string { return fmt.Sprintf("%s%016x", manifestPrefix, seq) }

// parseSeqKey returns the sequence of a journal or manifest key, or false
// for a name this package does not recognise (which is then ignored).
func parseSeqKey(prefix, key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) != 16 {
		return 0, false
	}
	v, err := strconv.ParseUint(rest, 16, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// Journal container magics: EBJ2 (written) carries the newest manifest
// the writer had published; EBJ1 (read) does not.
const (
	journalMagic   = "EBJ2"
	journalMagicV1 = "EBJ1"
)

// Header lengths: magic(4) seq(8) epoch(8) [manifest(8)] count(4).
const (
	journalHeaderLen   = 32
	journalHeaderLenV1 = 24
)

// maxJournalBatches bounds the batch count a decoder accepts before it has
// seen the bytes, so a forged count cannot make it allocate.
const maxJournalBatches = 1 << 24

// Journal is the decoded plaintext of one journal object.
type Journal struct {
	Seq   uint64
	Epoch uint64
	// Manifest is the newest manifest the writer had published when it
	// wrote the object (0: none, or an EBJ1 object): a following replica
	// learns from it which manifest its state has moved past, without a
	// LIST.
	Manifest uint64
	Batches  [][]byte // Pebble batch representations, in commit order
}

// EncodeJournal returns the plaintext container of a journal object.
func EncodeJournal(j Journal) []byte {
	n := journalHeaderLen
	for _, b := range j.Batches {
		n += 4 + len(b)
	}
	out := make([]byte, journalHeaderLen, n)
	copy(out, journalMagic)
	binary.LittleEndian.PutUint64(out[4:], j.Seq)
	binary.LittleEndian.PutUint64(out[12:], j.Epoch)
	binary.LittleEndian.PutUint64(out[20:], j.Manifest)
	binary.LittleEndian.PutUint32(out[28:], uint32(len(j.Batches)))
	for _, b := range j.Batches {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

// ErrCorrupt is wrapped by every error about a malformed or unauthentic
// metadata object. The message names the object.
var ErrCorrupt = errors.New("lsm: corrupt metadata object")

// DecodeJournal parses a journal plaintext container. The returned batch
// slices alias plain. Each batch must carry a valid Pebble batch header.
func DecodeJournal(plain []byte) (Journal, error) {
	var j Journal
	hlen := 0
	switch {
	case len(plain) >= journalHeaderLen && string(plain[:4]) == journalMagic:
		hlen = journalHeaderLen
		j.Manifest = binary.LittleEndian.Uint64(plain[20:])
	case len(plain) >= journalHeaderLenV1 && string(plain[:4]) == journalMagicV1:
		hlen = journalHeaderLenV1
	default:
		return j, errors.New("bad journal header")
	}
	j.Seq = binary.LittleEndian.Uint64(plain[4:])
	j.Epoch = binary.LittleEndian.Uint64(plain[12:])
	count := binary.LittleEndian.Uint32(plain[hlen-4:])
	if count > maxJournalBatches || uint64(count)*4 > uint64(len(plain)-hlen) {
		return j, fmt.Errorf("journal batch count %d does not fit in %d bytes", count, len(plain))
	}
	rest := plain[hlen:]
	j.Batches = make([][]byte, 0, count)
	for i := uint32(0); i < count; i++ {
		if len(rest) < 4 {
			return j, fmt.Errorf("journal batch %d: truncated length", i)
		}
		n := binary.LittleEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return j, fmt.Errorf("journal batch %d: length %d exceeds remaining %d bytes", i, n, len(rest))
		}
		b := rest[:n:n]
		rest = rest[n:]
		if _, ok := batchrepr.ReadHeader(b); !ok {
			return j, fmt.Errorf("journal batch %d: bad batch header", i)
		}
		j.Batches = append(j.Batches, b)
	}
	if len(rest) != 0 {
		return j, fmt.Errorf("journal has %d trailing bytes", len(rest))
	}
	return j, nil
}

// validateBatch walks a batch representation with its own bounds-checked
// decoder (Pebble's batchrepr reader trusts its input and can index out of
// range) and accepts only the record kinds Batch produces; merges must be
// well-formed counter deltas. This keeps a bad but authentic journal from
// crashing or wedging Pebble.
func validateBatch(repr []byte) error {
	h, ok := batchrepr.ReadHeader(repr)
	if !ok {
		return errors.New("bad batch header")
	}
	rest := repr[batchrepr.HeaderLen:]
	str := func() ([]byte, error) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || w > 5 || n > uint64(len(rest)-w) {
			return nil, errors.New("bad string length")
		}
		s := rest[w : w+int(n)]
		rest = rest[w+int(n):]
		return s, nil
	}
	var n uint32
	for len(rest) > 0 {
		kind := pebble.InternalKeyKind(rest[0])
		rest = rest[1:]
		ukey, err := str()
		if err != nil {
			return fmt.Errorf("batch record %d key: %v", n, err)
		}
		var value []byte
		switch kind {
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindLogData:
		case pebble.InternalKeyKindSet, pebble.InternalKeyKindDeleteSized, pebble.InternalKeyKindRangeDelete, pebble.InternalKeyKindMerge:
			if value, err = str(); err != nil {
				return fmt.Errorf("batch record %d value: %v", n, err)
			}
		default:
			return fmt.Errorf("batch record %d: unsupported kind %d", n, kind)
		}
		if kind == pebble.InternalKeyKindMerge {
			if err := checkCounterKey(ukey); err != nil {
				return err
			}
			if _, _, _, err := DecodeCounter(value); err != nil {
				return err
			}
		}
		if kind != pebble.InternalKeyKindLogData {
			n++
		}
	}
	if n != h.Count {
		return fmt.Errorf("batch header count %d, %d records", h.Count, n)
	}
	return nil
}

func aadFor(k *keys.Keys, kind string, name string) []byte {
	a := make([]byte, 0, 32+len(kind)+len(name))
	a = append(a, "ebbfs/"...)
	a = append(a, kind...)
	a = append(a, "/v1\x00"...)
	a = append(a, k.UUID[:]...)
	return append(a, name...)
}

func journalAAD(k *keys.Keys, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(aadFor(k, "journal", ""), seq)
}

func sealJournal(k *keys.Keys, j Journal) []byte {
	return k.Meta.Seal(journalAAD(k, j.Seq), EncodeJournal(j))
}

// openJournal authenticates and decodes the journal object at seq.
func openJournal(k *keys.Keys, seq uint64, sealed []byte) (Journal, error) {
	name := journalKey(seq)
	plain, err := k.Meta.Open(journalAAD(k, seq), sealed)
	if err != nil {
		return Journal{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	j, err := DecodeJournal(plain)
	if err != nil {
		return Journal{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	if j.Seq != seq {
		return Journal{}, fmt.Errorf("%w: %s: holds sequence %d", ErrCorrupt, name, j.Seq)
	}
	for i, b := range j.Batches {
		if err := validateBatch(b); err != nil {
			return Journal{}, fmt.Errorf("%w: %s: batch %d: %v", ErrCorrupt, name, i, err)
		}
	}
	return j, nil
}
