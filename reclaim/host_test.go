package reclaim

import "ebbfs.dev/ebbfs/fs"

var _ Host = (*fs.Engine)(nil)
var _ fs.Events = (*Reclaimer)(nil)
var _ fs.Events = (*Triggers)(nil)
