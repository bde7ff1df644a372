package reclaim

import "ebbfs.dev/ebbfs/fs"

// engineHost is the adapter cmd/ebbfs needs: *fs.Engine is a Host except
// for the Move type of Repoint.
type engineHost struct{ *fs.Engine }

func (h engineHost) Repoint(out uint64, frameBytes, objSize int64, moves []Move) (int, error) {
	fm := make([]fs.Move, len(moves))
	for i, m := range moves {
		fm[i] = fs.Move(m)
	}
	return h.Engine.Repoint(out, frameBytes, objSize, fm)
}

var _ Host = engineHost{}
var _ fs.Events = (*Reclaimer)(nil)
var _ fs.Events = (*Triggers)(nil)
