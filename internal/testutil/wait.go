package testutil

import (
	"testing"
	"time"
)

// Poll is how often Eventually and Until test their condition.
const Poll = 20 * time.Millisecond

// Until polls cond every Poll until it holds, and reports whether it did
// before timeout passed (real time: a slow machine only makes the wait
// longer, so give a deadline well past what the condition needs).
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(Poll)
	}
	return true
}

// Eventually polls cond until it holds and returns how long that took;
// it fails the test, naming what it waited for, if cond does not hold
// within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	if !Until(timeout, cond) {
		t.Fatalf("waited %s for %s: it did not happen", timeout, what)
	}
	return time.Since(start)
}
