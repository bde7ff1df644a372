// Package checkpoint owns checkpoint records (checkpoints/<name> in the
// object store), the reclamation horizon derived from them, and the
// reader's auto-renewed ephemeral checkpoint.
//
// A checkpoint pins a published metadata manifest, and through it every
// segment and metadata object that manifest references. Records are
// plaintext JSON: they hold a name chosen by the operator, a kind, a
// manifest sequence and two timestamps, never a file name or file data.
// See docs/FORMAT.md, "Checkpoint records".
package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind is the kind of a checkpoint.
type Kind string

const (
	// Persistent checkpoints live until deleted; while one exists segment
	// deletion and repack are paused.
	Persistent Kind = "persistent"
	// Ephemeral checkpoints carry an expiry and are renewed by their owner
	// (a reader); their span sets the reclamation grace.
	Ephemeral Kind = "ephemeral"
)

// Prefix is the object-store prefix of checkpoint records.
const Prefix = "checkpoints/"

// MaxNameLen is the longest accepted checkpoint name.
const MaxNameLen = 128

// MaxSpan is the longest accepted ephemeral span (ExpireTime-CreateTime).
// A longer one is treated as invalid rather than as a month-long pause.
const MaxSpan = 30 * 24 * time.Hour

// recordFormat is the format version written into every record.
const recordFormat = 1

var (
	// ErrExists is returned (wrapped) by Create when the name is taken.
	ErrExists = errors.New("checkpoint: a checkpoint with this name already exists")
	// ErrNotFound is returned (wrapped) when no record has the name.
	ErrNotFound = errors.New("checkpoint: no such checkpoint")
	// ErrInvalidName is returned (wrapped) by ValidName.
	ErrInvalidName = errors.New("checkpoint: invalid name")
	// ErrMalformed is returned (wrapped) for a record that cannot be
	// decoded or violates the format.
	ErrMalformed = errors.New("checkpoint: malformed record")
	// ErrInvalidSpan is returned (wrapped) by HorizonOf for an ephemeral
	// record whose times make no sense.
	ErrInvalidSpan = errors.New("checkpoint: invalid span")
)

// Record is one checkpoint.
type Record struct {
	Name        string
	Kind        Kind
	ManifestSeq uint64
	// CreateTime is when the checkpoint was created (or re-pinned by a
	// reader's Renewer). ExpireTime is when an ephemeral checkpoint lapses
	// unless renewed; it is zero for a persistent one.
	CreateTime, ExpireTime time.Time
}

// Span is ExpireTime-CreateTime for an ephemeral record, 0 otherwise.
func (r Record) Span() time.Duration {
	if r.Kind != Ephemeral || r.CreateTime.IsZero() || r.ExpireTime.IsZero() {
		return 0
	}
	return r.ExpireTime.Sub(r.CreateTime)
}

// Key returns the object key of the record named name.
func Key(name string) string { return Prefix + name }

// ValidName accepts 1..128 characters from [A-Za-z0-9._-], except "." and "..".
func ValidName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w %q: length must be 1..%d", ErrInvalidName, name, MaxNameLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w %q", ErrInvalidName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w %q: only letters, digits, '.', '_' and '-' are allowed", ErrInvalidName, name)
		}
	}
	return nil
}

// wire is the JSON form of a record.
type wire struct {
	Format      int       `json:"format"`
	Name        string    `json:"name"`
	Kind        Kind      `json:"kind"`
	ManifestSeq uint64    `json:"manifest_seq"`
	CreateTime  time.Time `json:"create_time"`
	ExpireTime  time.Time `json:"expire_time,omitzero"`
}

// validate checks the structure of a record (not its span: HorizonOf
// judges spans, so that List still shows a record with a bad one).
func (r Record) validate() error {
	if err := ValidName(r.Name); err != nil {
		return err
	}
	switch r.Kind {
	case Persistent:
		if !r.ExpireTime.IsZero() {
			return fmt.Errorf("persistent checkpoint has an expire_time")
		}
	case Ephemeral:
	default:
		return fmt.Errorf("unknown kind %q", r.Kind)
	}
	if r.ManifestSeq == 0 {
		return fmt.Errorf("manifest_seq is 0")
	}
	if r.CreateTime.IsZero() {
		return fmt.Errorf("create_time is missing")
	}
	return nil
}

func encodeRecord(r Record) ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("checkpoint: encode %q: %w", r.Name, err)
	}
	w := wire{Format: recordFormat, Name: r.Name, Kind: r.Kind, ManifestSeq: r.ManifestSeq,
		CreateTime: r.CreateTime.UTC(), ExpireTime: r.ExpireTime}
	if !w.ExpireTime.IsZero() {
		w.ExpireTime = w.ExpireTime.UTC()
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode %q: %w", r.Name, err)
	}
	return append(b, '\n'), nil
}

// decodeRecord parses the record stored under key. Unknown fields, a
// different format version and a name that does not match the key are
// all errors: a reader that does not understand a record must not guess.
func decodeRecord(key string, b []byte) (Record, error) {
	name, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		return Record{}, fmt.Errorf("%w: %s: not under %s", ErrMalformed, key, Prefix)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return Record{}, fmt.Errorf("%w: %s: %v", ErrMalformed, key, err)
	}
	if dec.More() {
		return Record{}, fmt.Errorf("%w: %s: trailing data", ErrMalformed, key)
	}
	if w.Format != recordFormat {
		return Record{}, fmt.Errorf("%w: %s: format %d, this build reads %d", ErrMalformed, key, w.Format, recordFormat)
	}
	r := Record{Name: w.Name, Kind: w.Kind, ManifestSeq: w.ManifestSeq, CreateTime: w.CreateTime, ExpireTime: w.ExpireTime}
	if r.Name != name {
		return Record{}, fmt.Errorf("%w: %s: holds name %q", ErrMalformed, key, r.Name)
	}
	if err := r.validate(); err != nil {
		return Record{}, fmt.Errorf("%w: %s: %v", ErrMalformed, key, err)
	}
	return r, nil
}
