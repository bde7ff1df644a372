package reclaim

import (
	"encoding/binary"
	"errors"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/lsm"
)

// DeadlinesKey holds, from the last clean stop, the grace each pending
// dead-segment deletion still had to wait: a version byte (1), then per
// segment its id and the remaining grace in nanoseconds (8-byte big-endian
// each). The next writer continues from it, so a store driven by many
// short-lived writers still reaches its deadlines. Time while no writer
// runs does not count: a deletion only ever waits longer than it would
// under one long-lived writer. A crash leaves the record of an earlier
// clean stop or none; either way every deadline is at least as late as
// the rules ask.
var DeadlinesKey = lsm.SystemKey("reclaim.deadlines")

const deadlinesVersion = 1

func encodeDeadlines(remaining map[uint64]time.Duration) []byte {
	out := make([]byte, 1, 1+16*len(remaining))
	out[0] = deadlinesVersion
	for id, d := range remaining {
		out = binary.BigEndian.AppendUint64(out, id)
		out = binary.BigEndian.AppendUint64(out, uint64(max(d, 0)))
	}
	return out
}

func decodeDeadlines(b []byte) (map[uint64]time.Duration, error) {
	if len(b) < 1 || b[0] != deadlinesVersion || (len(b)-1)%16 != 0 {
		return nil, errors.New("reclaim: malformed deadline record")
	}
	out := make(map[uint64]time.Duration, (len(b)-1)/16)
	for p := b[1:]; len(p) > 0; p = p[16:] {
		d := binary.BigEndian.Uint64(p[8:])
		if d > uint64(checkpoint.MaxSpan+checkpoint.GraceMargin) {
			return nil, errors.New("reclaim: deadline record holds a grace longer than any span allows")
		}
		out[binary.BigEndian.Uint64(p)] = time.Duration(d)
	}
	return out, nil
}

// restoreDeadlines picks up the remaining graces recorded at the last
// clean stop. A record that cannot be read is ignored: every dead segment
// then gets a full grace when first seen, which is never too early.
func (r *Reclaimer) restoreDeadlines() {
	v, found, err := r.host.MetaGet(DeadlinesKey)
	if err != nil || !found {
		if err != nil {
			r.log.Warn("reclaim: cannot read the recorded deadlines; dead segments get a full grace", "err", err)
		}
		return
	}
	rem, err := decodeDeadlines(v)
	if err != nil {
		r.log.Warn("reclaim: ignoring the recorded deadlines; dead segments get a full grace", "err", err)
		return
	}
	now := r.clk.Mono()
	r.mu.Lock()
	for id, d := range rem {
		r.mu.deadlines[id] = now + d
	}
	r.mu.Unlock()
	if len(rem) > 0 {
		r.log.Info("reclaim: continuing the deadlines of the last writer", "segments", len(rem))
	}
}

// saveDeadlines records the remaining grace of every pending deletion (at
// Close, before the engine's final barrier makes it durable).
func (r *Reclaimer) saveDeadlines() error {
	now := r.clk.Mono()
	r.mu.Lock()
	rem := make(map[uint64]time.Duration, len(r.mu.deadlines))
	for id, d := range r.mu.deadlines {
		rem[id] = d - now
	}
	r.mu.Unlock()
	if len(rem) == 0 {
		return r.host.MetaPut(DeadlinesKey, nil)
	}
	return r.host.MetaPut(DeadlinesKey, encodeDeadlines(rem))
}
