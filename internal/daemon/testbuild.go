//go:build ebbfs_testclock

package daemon

import (
	"log/slog"
	"os"
	"time"
)

// This file exists only in the test build (-tags ebbfs_testclock), which
// the end-to-end tests and make test use. It adds failpoints
// (internal/failpoint) and the test time scale (internal/clock);
// production builds have neither.

// TestTags names the test-only tags this binary was built with.
const TestTags = "ebbfs_testclock"

// testJournalRetention lets end-to-end tests shorten how long the writer
// keeps covered journals (and what its replicas rely on), so that a test
// can pause a replica for longer than that.
func testJournalRetention(log *slog.Logger) time.Duration {
	v := os.Getenv("EBBFS_TEST_JOURNAL_RETENTION")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		log.Warn("ignoring an invalid EBBFS_TEST_JOURNAL_RETENTION", "value", v)
		return 0
	}
	log.Warn("TEST BUILD: journal retention changed", "retention", d)
	return d
}

// testManifestInterval lets end-to-end tests shorten the longest time
// between metadata manifests (EBBFS_TEST_MANIFEST_INTERVAL), so that a
// test waits past a publication in seconds. 0: the default.
func testManifestInterval(log *slog.Logger) time.Duration {
	v := os.Getenv("EBBFS_TEST_MANIFEST_INTERVAL")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		log.Warn("ignoring an invalid EBBFS_TEST_MANIFEST_INTERVAL", "value", v)
		return 0
	}
	log.Warn("TEST BUILD: manifest interval changed", "interval", d)
	return d
}

// testReaderTTL lets end-to-end tests shorten a reader checkpoint's
// lifetime (EBBFS_TEST_READER_TTL), so that a paused replica outlives its
// span within a test. 0: the default.
func testReaderTTL(log *slog.Logger) time.Duration {
	v := os.Getenv("EBBFS_TEST_READER_TTL")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		log.Warn("ignoring an invalid EBBFS_TEST_READER_TTL", "value", v)
		return 0
	}
	log.Warn("TEST BUILD: reader checkpoint lifetime changed", "ttl", d)
	return d
}

// warnTestOnlyEnv has nothing to warn about in a test build.
func warnTestOnlyEnv(log *slog.Logger) {}
