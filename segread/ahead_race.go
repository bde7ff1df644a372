//go:build race

package segread

import "time"

// The race detector slows the reads that take spans out of the table
// several times over (more than tenfold in the fs tests' streams), so a
// span waits for its readers correspondingly longer before it is dropped
// and its frames read a second time.
func init() { aheadTTL = 10 * time.Second }
