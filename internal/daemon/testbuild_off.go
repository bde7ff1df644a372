//go:build !ebbfs_testclock

package daemon

import (
	"log/slog"
	"os"
	"time"

	"ebbfs.dev/ebbfs/internal/failpoint"
)

// TestTags is empty: this is a production build.
const TestTags = ""

// testJournalRetention is the default in production builds.
func testJournalRetention(*slog.Logger) time.Duration { return 0 }

// testManifestInterval is the default in production builds.
func testManifestInterval(*slog.Logger) time.Duration { return 0 }

// testReaderTTL is the default in production builds.
func testReaderTTL(*slog.Logger) time.Duration { return 0 }

// warnTestOnlyEnv says loudly that the test build's variables have no
// effect here, rather than honouring or dropping them silently.
func warnTestOnlyEnv(log *slog.Logger) {
	if s := os.Getenv(failpoint.Env); s != "" {
		log.Warn(failpoint.Env+" is ignored: this is a production build (failpoints exist only with -tags ebbfs_testclock)", "value", s)
	}
	if s := os.Getenv("EBBFS_TEST_JOURNAL_RETENTION"); s != "" {
		log.Warn("EBBFS_TEST_JOURNAL_RETENTION is ignored: this is a production build", "value", s)
	}
	if s := os.Getenv("EBBFS_TEST_MANIFEST_INTERVAL"); s != "" {
		log.Warn("EBBFS_TEST_MANIFEST_INTERVAL is ignored: this is a production build", "value", s)
	}
	if s := os.Getenv("EBBFS_TEST_READER_TTL"); s != "" {
		log.Warn("EBBFS_TEST_READER_TTL is ignored: this is a production build", "value", s)
	}
}
