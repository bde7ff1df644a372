//go:build ebbfs_testclock

package main

import "log/slog"

// This file exists only in the test build (-tags ebbfs_testclock), which
// the end-to-end tests and make test use. It adds failpoints
// (internal/failpoint) and the test time scale (internal/clock);
// production builds have neither.

// testTags names the test-only tags this binary was built with.
const testTags = "ebbfs_testclock"

// warnTestOnlyEnv has nothing to warn about in a test build.
func warnTestOnlyEnv(log *slog.Logger) {}
