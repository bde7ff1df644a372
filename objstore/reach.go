package objstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
)

// DefaultConnectTimeout is how long Reach waits for a store that does not
// answer before it gives up ([storage] connect_timeout).
const DefaultConnectTimeout = 2 * time.Minute

// firstNotice is when Reach first says what it waits for: the first
// attempt's own deadline, so the line comes within 5 s of the start.
const firstNotice = 3 * time.Second

// maxAttemptTimeout caps one attempt; later attempts wait longer than the
// first (a slow link may need more than 4 s) but a silent store is asked
// again at least this often.
const maxAttemptTimeout = 30 * time.Second

// Prober is a store that can check, with one request, that it is
// reachable and usable: the endpoint answers, the credentials are
// accepted and the bucket exists.
type Prober interface {
	// Probe makes one attempt (no retries inside). Its error is a
	// *ProbeError when it can say what is wrong.
	Probe(ctx context.Context) error
	// Where names what Probe talks to, for messages ("http://host:port").
	Where() string
}

// ProbeError is a failed probe explained for a user: what is wrong and
// what to do.
type ProbeError struct {
	// Transient is true when waiting may help: no answer, a refused or
	// unreachable endpoint, a 5xx. Otherwise the store answered and said
	// no (credentials, bucket, region, permissions).
	Transient bool
	// Msg is the one-line explanation.
	Msg string
	// Err is the underlying error (for %w and errors.Is).
	Err error
}

func (e *ProbeError) Error() string { return e.Msg }
func (e *ProbeError) Unwrap() error { return e.Err }

// ErrNoAnswer is wrapped by Reach's error when the store did not become
// reachable within the timeout.
var ErrNoAnswer = errors.New("objstore: no answer from the store")

// ReachOptions configure Reach.
type ReachOptions struct {
	// Timeout is how long to keep trying (default DefaultConnectTimeout).
	Timeout time.Duration
	// TimeoutKey names the setting that sets Timeout, for messages.
	TimeoutKey string
	// Notify receives each "waiting for ..." line (default: dropped).
	Notify func(line string)
	// Clock times the pauses between attempts (default: the real clock).
	Clock clock.Clock
}

// Reach makes the first contact with st before a command relies on it: it
// returns nil once the store answers, a *ProbeError at once when the
// store answers no, and an error wrapping ErrNoAnswer when it has not
// answered within o.Timeout. Meanwhile it tells o.Notify what it waits
// for, the first time within 5 s. A store that is not a Prober (a local
// directory) is reachable by definition.
func Reach(ctx context.Context, st Store, o ReachOptions) error {
	p, ok := st.(Prober)
	if !ok {
		return nil
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultConnectTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Notify == nil {
		o.Notify = func(string) {}
	}
	start := o.Clock.Mono()
	attempt, pause := firstNotice, time.Second
	lastSaid := ""
	var lastSaidAt time.Duration
	for {
		elapsed := o.Clock.Mono() - start
		left := o.Timeout - elapsed
		actx, cancel := context.WithTimeout(ctx, min(attempt, max(left, time.Millisecond)))
		err := p.Probe(actx)
		timedOut := actx.Err() != nil
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("reaching %s: %w", p.Where(), ctx.Err())
		}
		var pe *ProbeError
		if !errors.As(err, &pe) || (timedOut && pe.Transient) {
			pe = &ProbeError{Transient: timedOut, Msg: err.Error(), Err: err}
		}
		if !pe.Transient {
			return pe
		}
		elapsed = o.Clock.Mono() - start
		what := pe.Msg
		if timedOut {
			what = "no answer for " + roundSec(elapsed)
		}
		giveUp := func() error {
			return &noAnswerError{msg: fmt.Sprintf("%s: %s; gave up after %s (%s = %s)", p.Where(), what, roundSec(elapsed), o.TimeoutKey, o.Timeout), last: pe}
		}
		if elapsed >= o.Timeout {
			return giveUp()
		}
		// Say it at every silent attempt's end, when the reason
		// changes, and every 30 s.
		if timedOut || pe.Msg != lastSaid || elapsed-lastSaidAt >= 30*time.Second {
			o.Notify(fmt.Sprintf("waiting for %s: %s, retrying (giving up after %s, %s)", p.Where(), what, o.Timeout, o.TimeoutKey))
			lastSaid, lastSaidAt = pe.Msg, elapsed
		}
		if !timedOut {
			// It failed fast (refused): pause before asking again.
			select {
			case <-ctx.Done():
				return fmt.Errorf("reaching %s: %w", p.Where(), ctx.Err())
			case <-o.Clock.After(min(pause, o.Timeout-elapsed)):
			}
			pause = min(2*pause, 5*time.Second)
			if elapsed = o.Clock.Mono() - start; elapsed >= o.Timeout {
				return giveUp() // with the reason seen, not a last-moment attempt's
			}
		}
		attempt = min(2*attempt, maxAttemptTimeout)
	}
}

// noAnswerError is Reach's error when the store never answered: one line,
// wrapping ErrNoAnswer and the last attempt's error.
type noAnswerError struct {
	msg  string
	last error
}

func (e *noAnswerError) Error() string   { return e.msg }
func (e *noAnswerError) Unwrap() []error { return []error{ErrNoAnswer, e.last} }

func roundSec(d time.Duration) string {
	return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
}
