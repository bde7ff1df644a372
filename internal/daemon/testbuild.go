//go:build ebbfs_testclock

package daemon

import (
	"log/slog"
	"os"
	"time"

	"ebbfs.dev/ebbfs/fs"
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

// testPatches turns on patch writes (fs.PatchWritesForTests) when
// EBBFS_TEST_PATCHES is 1, so that end-to-end tests (the crash matrix)
// run the real binary storing partial writes as patches while the switch
// is off for everyone else. The engine still honours it only on a
// filesystem of descriptor format 4.
func testPatches(log *slog.Logger, o *fs.Options) {
	if os.Getenv("EBBFS_TEST_PATCHES") != "1" {
		return
	}
	fs.PatchWritesForTests(o)
	log.Warn("TEST BUILD: partial writes are stored as patches")
}

// warnTestOnlyEnv has nothing to warn about in a test build.
func warnTestOnlyEnv(log *slog.Logger) {}
