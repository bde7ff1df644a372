package objstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeProber answers from a script of errors, then nil; a nil-script
// prober that blocks is silent.
type fakeProber struct {
	*Mem
	errs   []error
	silent bool
	calls  int
}

func (f *fakeProber) Where() string { return "http://fake" }

func (f *fakeProber) Probe(ctx context.Context) error {
	f.calls++
	if f.silent {
		<-ctx.Done()
		return ctx.Err()
	}
	if len(f.errs) == 0 {
		return nil
	}
	err := f.errs[0]
	f.errs = f.errs[1:]
	return err
}

func TestReachPermanentFailsAtOnce(t *testing.T) {
	denied := &ProbeError{Msg: "access denied"}
	p := &fakeProber{Mem: NewMem(), errs: []error{denied}}
	var lines []string
	err := Reach(context.Background(), p, ReachOptions{Timeout: time.Minute, Notify: func(l string) { lines = append(lines, l) }})
	if !errors.Is(err, denied) || p.calls != 1 || len(lines) != 0 {
		t.Fatalf("err %v after %d calls, lines %q; want the denial at once, silently", err, p.calls, lines)
	}
}

func TestReachWaitsOutRefusals(t *testing.T) {
	refused := &ProbeError{Transient: true, Msg: "connection refused"}
	p := &fakeProber{Mem: NewMem(), errs: []error{refused, refused}}
	var lines []string
	err := Reach(context.Background(), p, ReachOptions{Timeout: time.Minute, TimeoutKey: "k", Notify: func(l string) { lines = append(lines, l) }})
	if err != nil || p.calls != 3 {
		t.Fatalf("err %v after %d calls; want success at the third", err, p.calls)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "waiting for http://fake: connection refused") {
		t.Fatalf("lines %q; want one waiting line", lines)
	}
}

func TestReachGivesUpOnSilence(t *testing.T) {
	p := &fakeProber{Mem: NewMem(), silent: true}
	start := time.Now()
	err := Reach(context.Background(), p, ReachOptions{Timeout: 1200 * time.Millisecond, TimeoutKey: "storage.connect_timeout"})
	if !errors.Is(err, ErrNoAnswer) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "no answer for 1 s; gave up") {
		t.Fatalf("err %q; want one line wrapping ErrNoAnswer", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("gave up after %s", took)
	}
}

func TestReachLocalNeedsNoContact(t *testing.T) {
	if err := Reach(context.Background(), NewMem(), ReachOptions{}); err != nil {
		t.Fatal(err)
	}
}
