package checkpoint

import (
	"fmt"
	"sort"
	"time"
)

// The grace rule's safety margins (DESIGN section 8). They are not tuning
// knobs: nothing lowers them.
const (
	// GraceFloor is the shortest grace a dead segment ever gets.
	GraceFloor = 60 * time.Second
	// GraceMargin is added to the longest ephemeral span.
	GraceMargin = 30 * time.Second
)

// Horizon is what the checkpoint list means for reclamation.
type Horizon struct {
	// Paused is true while any persistent checkpoint exists: segment
	// deletion and repack wait. PinnedBy names those checkpoints, sorted.
	Paused   bool
	PinnedBy []string
	// Grace is how long a segment that becomes dead now must wait before
	// deletion: max(GraceFloor, longest ephemeral span + GraceMargin).
	// Both ends of a span come from the record, so no reader's clock is
	// compared with the writer's.
	Grace time.Duration
	// GraceBy names the ephemeral record whose span sets Grace above
	// GraceFloor ("" when the floor applies), and GraceByExpires is its
	// ExpireTime: what holds dead segments back, and until when.
	GraceBy        string
	GraceByExpires time.Time
}

// HorizonOf derives the horizon from a complete checkpoint list. An
// ephemeral record with an invalid span (a zero time, expire before
// create, or longer than MaxSpan) or a record of unknown kind is an error:
// that cycle reclaims nothing.
func HorizonOf(recs []Record) (Horizon, error) {
	h := Horizon{Grace: GraceFloor}
	var longest time.Duration
	for _, r := range recs {
		switch r.Kind {
		case Persistent:
			h.Paused = true
			h.PinnedBy = append(h.PinnedBy, r.Name)
		case Ephemeral:
			if err := validSpan(r); err != nil {
				return Horizon{}, err
			}
			if sp := r.Span(); sp > longest {
				longest = sp
				h.GraceBy, h.GraceByExpires = r.Name, r.ExpireTime
			}
		default:
			return Horizon{}, fmt.Errorf("checkpoint %q: unknown kind %q", r.Name, r.Kind)
		}
	}
	sort.Strings(h.PinnedBy)
	h.Grace = max(GraceFloor, longest+GraceMargin)
	if h.Grace == GraceFloor {
		h.GraceBy, h.GraceByExpires = "", time.Time{}
	}
	return h, nil
}

// validSpan checks an ephemeral record's times.
func validSpan(r Record) error {
	switch {
	case r.CreateTime.IsZero() || r.ExpireTime.IsZero():
		return fmt.Errorf("%w: checkpoint %q: ephemeral with a zero create_time or expire_time", ErrInvalidSpan, r.Name)
	case r.ExpireTime.Before(r.CreateTime):
		return fmt.Errorf("%w: checkpoint %q: expire_time %v is before create_time %v", ErrInvalidSpan, r.Name, r.ExpireTime, r.CreateTime)
	case r.ExpireTime.Sub(r.CreateTime) > MaxSpan:
		return fmt.Errorf("%w: checkpoint %q: span %v exceeds %v", ErrInvalidSpan, r.Name, r.ExpireTime.Sub(r.CreateTime), MaxSpan)
	}
	return nil
}
