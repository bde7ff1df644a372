package lsm

import (
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/lsm/schema"
)

// What a mirror (package mirror) needs to follow a store without listing
// it: the names of journal and manifest objects, their authenticated
// contents, and the segments a journal creates or forgets.

// Object-key prefixes under meta/, for callers outside this package.
const (
	JournalPrefix  = journalPrefix
	ManifestPrefix = manifestPrefix
	SSTPrefix      = sstPrefix
)

// JournalKey is the object key of journal seq.
func JournalKey(seq uint64) string { return journalKey(seq) }

// ManifestKey is the object key of manifest seq.
func ManifestKey(seq uint64) string { return manifestKey(seq) }

// ParseManifestKey returns the sequence of a manifest key, or false.
func ParseManifestKey(key string) (uint64, bool) { return parseSeqKey(manifestPrefix, key) }

// OpenJournal authenticates and decodes the sealed journal object at seq.
func OpenJournal(k *keys.Keys, seq uint64, sealed []byte) (Journal, error) {
	return openJournal(k, seq, sealed)
}

// OpenManifest authenticates and decodes the sealed manifest at seq.
func OpenManifest(k *keys.Keys, seq uint64, sealed []byte) (*Manifest, error) {
	return openManifest(k, seq, sealed)
}

// CounterEvent is what one journal record says about a segment's object:
// Created when a merge credits the object's size (the batch that commits
// its first pointers, or a counter recreated for an object found intact),
// Dropped when the counter is deleted (the object was deleted first).
type CounterEvent struct {
	Segment uint64
	Size    int64 // the object's size, for Created
	Created bool
	Dropped bool
}

// JournalCounters lists, in commit order, the segment creations and drops
// the journal's batches record. The journal must come from OpenJournal
// (its batches are validated).
func JournalCounters(j Journal) ([]CounterEvent, error) {
	var out []CounterEvent
	for _, b := range j.Batches {
		r, err := batchReader(b)
		if err != nil {
			return nil, err
		}
		for {
			kind, ukey, value, ok, err := r.Next()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			if len(ukey) != 9 || ukey[0] != schema.PCounter {
				continue
			}
			seg := binary.BigEndian.Uint64(ukey[1:])
			switch kind {
			case pebble.InternalKeyKindMerge, pebble.InternalKeyKindSet:
				_, _, size, err := DecodeCounter(value)
				if err != nil {
					return nil, err
				}
				if size > 0 {
					out = append(out, CounterEvent{Segment: seg, Size: size, Created: true})
				}
			case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindDeleteSized:
				out = append(out, CounterEvent{Segment: seg, Dropped: true})
			}
		}
	}
	return out, nil
}

// SealJournal returns the sealed journal object of j (tests that build a
// store by hand).
func SealJournal(k *keys.Keys, j Journal) []byte { return sealJournal(k, j) }

// SealManifest returns the sealed manifest object of m (tests that build
// a store by hand).
func SealManifest(k *keys.Keys, m *Manifest) ([]byte, error) {
	plain, err := encodeManifest(m)
	if err != nil {
		return nil, err
	}
	return k.Meta.Seal(manifestAAD(k, m.Seq), plain), nil
}
