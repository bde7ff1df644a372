package testutil

import (
	"fmt"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/mountinfo"
)

// MountType returns the filesystem type mounted at dir ("fuse.ebbfs"),
// or "" when nothing is mounted there.
func MountType(dir string) string {
	m, ok, err := mountinfo.Find(dir)
	if err != nil || !ok {
		return ""
	}
	return m.FSType
}

// WaitMountTable waits until the mount table lists a mount at dir (present)
// or lists none (!present), failing the test after timeout.
func WaitMountTable(t testing.TB, dir string, present bool, timeout time.Duration) {
	t.Helper()
	what := fmt.Sprintf("a mount at %s in the mount table", dir)
	if !present {
		what = fmt.Sprintf("no mount at %s in the mount table", dir)
	}
	Eventually(t, timeout, what, func() bool { return (MountType(dir) != "") == present })
}
