// Package testutil holds what the tests of several packages share: it is
// imported only by _test.go files.
package testutil
