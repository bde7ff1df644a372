package fs

// The fs package's tests run with patch writes on by default, as they were
// validated (patchesByDefault, engine.go): tests of the whole-extent path
// ask for whole writes.
func init() { patchesByDefault = true }
