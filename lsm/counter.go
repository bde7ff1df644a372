package lsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// CounterLen is the size of a counter value: three little-endian int64s
// (live bytes, total bytes, object size).
const CounterLen = 24

// CounterMergerName is recorded by Pebble in OPTIONS and MANIFEST; a store
// written with another merger refuses to open.
const CounterMergerName = "ebbfs.counter.v1"

// ErrBadCounter reports a counter value or merge operand of the wrong shape,
// or a merge on a key outside the counter key space.
var ErrBadCounter = errors.New("lsm: malformed counter")

// CounterDelta encodes a counter value or merge delta.
func CounterDelta(live, total, size int64) []byte {
	b := make([]byte, CounterLen)
	binary.LittleEndian.PutUint64(b[0:], uint64(live))
	binary.LittleEndian.PutUint64(b[8:], uint64(total))
	binary.LittleEndian.PutUint64(b[16:], uint64(size))
	return b
}

// DecodeCounter decodes a counter value.
func DecodeCounter(b []byte) (live, total, size int64, err error) {
	if len(b) != CounterLen {
		return 0, 0, 0, fmt.Errorf("%w: %d bytes, want %d", ErrBadCounter, len(b), CounterLen)
	}
	return int64(binary.LittleEndian.Uint64(b[0:])),
		int64(binary.LittleEndian.Uint64(b[8:])),
		int64(binary.LittleEndian.Uint64(b[16:])), nil
}

func checkCounterKey(key []byte) error {
	if len(key) == 0 || key[0] != PrefixCounter {
		return fmt.Errorf("%w: merge on key %q outside the counter prefix %q", ErrBadCounter, key, PrefixCounter)
	}
	return nil
}

// counterMerger is the Pebble merge operator. Merge is addition, which is
// associative and commutative, so newer/older order does not matter.
var counterMerger = &pebble.Merger{
	Name: CounterMergerName,
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		if err := checkCounterKey(key); err != nil {
			return nil, err
		}
		m := &counterValueMerger{}
		if err := m.add(value); err != nil {
			return nil, err
		}
		return m, nil
	},
}

type counterValueMerger struct {
	live, total, size int64
}

func (m *counterValueMerger) add(v []byte) error {
	l, t, s, err := DecodeCounter(v)
	if err != nil {
		return err
	}
	m.live += l
	m.total += t
	m.size += s
	return nil
}

func (m *counterValueMerger) MergeNewer(v []byte) error { return m.add(v) }
func (m *counterValueMerger) MergeOlder(v []byte) error { return m.add(v) }
func (m *counterValueMerger) Finish(bool) ([]byte, io.Closer, error) {
	return CounterDelta(m.live, m.total, m.size), nil, nil
}
