package lsm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/diskspace"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
)

// Defaults.
const (
	DefaultManifestEvery    = 64
	DefaultManifestBytes    = 64 << 20
	DefaultManifestInterval = 10 * time.Minute
	// DefaultLeaseTTL: heartbeats every TTL/3 = 10 min, so an idle writer
	// sends no request for minutes at a time; a writer on the same host
	// whose process died is taken over at once, one on another host after
	// the TTL.
	DefaultLeaseTTL = 30 * time.Minute
)

// Options configure a DB. Zero values take the documented defaults.
type Options struct {
	// Dir is the local state directory (inside the cache dir). lsm owns it:
	// Dir/pebble is the Pebble store, Dir/CLEAN the clean-shutdown marker,
	// Dir/tmp holds checkpoints being shipped. It is wiped on a full
	// recovery.
	Dir    string
	Store  objstore.Store
	Keys   *keys.Keys // Meta AEAD encrypts journal, manifests, SSTs
	Clock  clock.Clock
	Logger *slog.Logger
	// ReadOnly opens a replica: no lease, no writes.
	ReadOnly bool
	// Holder describes this writer in writer.lease (default "host:pid").
	Holder string
	// Host and PID identify this process for same-host liveness checks
	// (default os.Hostname and os.Getpid; tests override them).
	Host string
	PID  int
	// LeaseTTL is how stale a heartbeat must be before another host takes
	// the lease over (default 30 min). Heartbeats run every LeaseTTL/3.
	LeaseTTL time.Duration
	// TakeOver takes the lease at once even from a holder whose heartbeat
	// is fresh (`ebbfs run --take-over`, after a writer crashed on another
	// machine). Safety does not depend on the old holder being dead: it
	// is fenced at its next journal write or heartbeat and acknowledges
	// nothing after that.
	TakeOver bool
	// StandbyID is this process's entry in the lease's standbys when it
	// runs as a standby (ha.go); a writer drops it from the list it
	// inherits.
	StandbyID string

	// A manifest is published automatically after ManifestEvery journal
	// objects (default 64), ManifestBytes journal bytes (default 64 MiB),
	// or ManifestInterval (default 10 min) with anything new.
	ManifestEvery    int
	ManifestBytes    int64
	ManifestInterval time.Duration
	// JournalRetention is how long a writer keeps a journal object after
	// writing it, even once a manifest covers it, so that replicas can
	// follow journal by journal without listing (follow.go). Default
	// DefaultJournalRetention; negative: delete covered journals at once.
	// A replica must use the writer's value.
	JournalRetention time.Duration
	// DisableAutoPublish turns the background publisher off (tests, tools).
	DisableAutoPublish bool

	// MakeRoom, if set, is asked to free up to n bytes on Dir's
	// filesystem (the disk cache) before the emergency reserve is
	// released (reserve.go); it returns the bytes it freed.
	MakeRoom func(n int64) int64
	// Space, if set, runs the periodic check of the free space on Dir's
	// filesystem (shared with the disk cache); otherwise the DB starts a
	// watcher of its own.
	Space *diskspace.Watcher

	// Tune, if set, adjusts the Pebble options before Open (tests use it
	// for tiny memtables). It must not change the Merger or Comparer.
	Tune func(*pebble.Options)
}

// EnsureDefaults fills in zero fields.
func (o *Options) EnsureDefaults() {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	if o.Holder == "" {
		o.Holder = fmt.Sprintf("%s:%d", o.Host, o.PID)
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.ManifestEvery <= 0 {
		o.ManifestEvery = DefaultManifestEvery
	}
	if o.ManifestBytes <= 0 {
		o.ManifestBytes = DefaultManifestBytes
	}
	if o.ManifestInterval <= 0 {
		o.ManifestInterval = DefaultManifestInterval
	}
	if o.JournalRetention == 0 {
		o.JournalRetention = DefaultJournalRetention
	}
	if o.JournalRetention < 0 {
		o.JournalRetention = 0
	}
}

// Validate reports missing required fields.
func (o *Options) Validate() error {
	switch {
	case o.Dir == "":
		return errors.New("lsm: Options.Dir is required")
	case o.Store == nil:
		return errors.New("lsm: Options.Store is required")
	case o.Keys == nil || o.Keys.Meta == nil:
		return errNoKeys
	}
	return nil
}

// pebbleLogger routes Pebble's logging into slog.
type pebbleLogger struct {
	l       *slog.Logger
	onFatal func(msg string) // DB.fatal: does not return
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is Pebble's "cannot continue" (a failed write of its log or
// MANIFEST, an internal invariant); Pebble expects it not to return. The
// DB fails (failure.go).
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble fatal: " + msg)
	if p.onFatal != nil {
		p.onFatal(msg)
	}
	panic("pebble: " + msg)
}
