package mirror

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"ebbfs.dev/ebbfs/objstore"
)

// StateKey is where a mirror keeps its position, in the mirror store
// itself: a store that has the state holds everything the state says was
// copied. No ebbfs package reads or lists "mirror/".
const StateKey = "mirror/state"

const stateFormat = 1

// ErrOtherMirror is returned when another mirror process wrote the state
// since this one read it: two processes must not mirror into one store.
var ErrOtherMirror = errors.New("mirror: another mirror process writes to this mirror store")

// State is a mirror's persisted position (docs/FORMAT.md, "Mirror").
type State struct {
	Format int    `json:"format"`
	UUID   string `json:"uuid"` // the source filesystem's uuid, hex
	// Instance is drawn by each mirror process: two processes never save
	// the same bytes, so a lost condition is told from an unheard success.
	Instance string `json:"instance"`
	// Synced: the first full copy (or the one after a gap) is done.
	Synced bool `json:"synced"`
	// Next is the next journal sequence to copy.
	Next uint64 `json:"next"`
	// JournalLow is the lowest journal sequence the mirror may still hold.
	JournalLow uint64 `json:"journal_low"`
	// Manifests copied and not yet deleted, ascending by Seq.
	Manifests []ManifestEntry `json:"manifests"`
	// Pending deletions, in the order they were learnt (so ascending Due).
	Pending []PendingDelete `json:"pending"`
	// Records are the checkpoint records copied, by name.
	Records map[string]RecordEntry `json:"records"`
	// Epoch is the newest writer epoch whose lease record was copied.
	Epoch uint64 `json:"epoch"`
	// Descriptor is the source descriptor's ETag when last copied.
	Descriptor string `json:"descriptor_etag"`
	// CaughtUp is the start of the newest probe after which the mirror held
	// everything the source had made durable.
	CaughtUp time.Time `json:"caught_up"`
}

// ManifestEntry is one manifest in the mirror: when it was copied and the
// table objects it lists.
type ManifestEntry struct {
	Seq    uint64    `json:"seq"`
	At     time.Time `json:"at"`
	Tables []string  `json:"tables"`
}

// PendingDelete is an object deleted from the source that the mirror
// deletes once Due has passed, and not while a copied checkpoint record
// pins a manifest older than Journal, the journal that recorded the
// deletion.
type PendingDelete struct {
	Key     string    `json:"key"`
	Journal uint64    `json:"journal"`
	Due     time.Time `json:"due"`
}

// RecordEntry is one copied checkpoint record.
type RecordEntry struct {
	Manifest uint64    `json:"manifest"`
	ETag     string    `json:"etag"`          // the source's, when copied
	Gone     time.Time `json:"gone,omitzero"` // first seen missing from the source
}

func (s *State) manifestIndex(seq uint64) int {
	i, ok := slices.BinarySearchFunc(s.Manifests, seq, func(e ManifestEntry, t uint64) int {
		switch {
		case e.Seq < t:
			return -1
		case e.Seq > t:
			return 1
		}
		return 0
	})
	if !ok {
		return -1
	}
	return i
}

func (s *State) addManifest(e ManifestEntry) {
	if s.manifestIndex(e.Seq) >= 0 {
		return
	}
	i, _ := slices.BinarySearchFunc(s.Manifests, e.Seq, func(e ManifestEntry, t uint64) int {
		if e.Seq < t {
			return -1
		}
		return 1
	})
	s.Manifests = slices.Insert(s.Manifests, i, e)
}

func (s *State) newestManifest() uint64 {
	if len(s.Manifests) == 0 {
		return 0
	}
	return s.Manifests[len(s.Manifests)-1].Seq
}

// tableSet is every table a kept manifest lists.
func (s *State) tableSet() map[string]bool {
	t := map[string]bool{}
	for _, m := range s.Manifests {
		for _, n := range m.Tables {
			t[n] = true
		}
	}
	return t
}

func (s *State) addPending(p PendingDelete) {
	for _, q := range s.Pending {
		if q.Key == p.Key {
			return
		}
	}
	s.Pending = append(s.Pending, p)
}

// stateStore reads and writes the state with conditional PUTs, so that a
// second mirror process into the same store is noticed.
type stateStore struct {
	dst  objstore.Store
	etag string
	last []byte
}

func (ss *stateStore) load(ctx context.Context) (*State, error) {
	b, err := ss.dst.Get(ctx, StateKey)
	if objstore.IsNotFound(err) {
		return &State{Format: stateFormat, Records: map[string]RecordEntry{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mirror: reading %s: %w", StateKey, err)
	}
	info, err := ss.dst.Head(ctx, StateKey)
	if err != nil {
		return nil, fmt.Errorf("mirror: reading %s: %w", StateKey, err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("mirror: %s is not a mirror state: %w", StateKey, err)
	}
	if st.Format != stateFormat {
		return nil, fmt.Errorf("mirror: %s has format %d, this build reads %d", StateKey, st.Format, stateFormat)
	}
	if st.Records == nil {
		st.Records = map[string]RecordEntry{}
	}
	ss.etag, ss.last = info.ETag, b
	return &st, nil
}

func (ss *stateStore) save(ctx context.Context, st *State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("mirror: encoding state: %w", err)
	}
	opts := objstore.PutOptions{IfAbsent: ss.etag == ""}
	if ss.etag != "" {
		opts.IfMatch = ss.etag
	}
	etag, err := ss.dst.Put(ctx, StateKey, b, opts)
	if objstore.IsPreconditionFailed(err) {
		// An earlier attempt may have got through unheard: ours if the
		// bytes are ours.
		cur, gerr := ss.dst.Get(ctx, StateKey)
		if gerr != nil || !bytes.Equal(cur, b) {
			return ErrOtherMirror
		}
		info, herr := ss.dst.Head(ctx, StateKey)
		if herr != nil {
			return fmt.Errorf("mirror: saving state: %w", herr)
		}
		etag, err = info.ETag, nil
	}
	if err != nil {
		return fmt.Errorf("mirror: saving state: %w", err)
	}
	ss.etag, ss.last = etag, b
	return nil
}
