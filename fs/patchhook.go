//go:build ebbfs_testclock

package fs

// PatchWritesForTests turns patch writes (patch.go) on in o, for other
// packages' tests and for a test build of the binary with
// EBBFS_TEST_PATCHES=1 (patchesByDefault is off). Test builds only (the
// ebbfs_testclock tag).
func PatchWritesForTests(o *Options) { o.patchWrites, o.wholeWrites = true, false }
