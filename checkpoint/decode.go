package checkpoint

// DecodeRecord parses the record stored under key (checkpoints/<name>), for
// a caller that has the bytes already: the mirror copies a record as it
// is and reads only the manifest it pins.
func DecodeRecord(key string, b []byte) (Record, error) { return decodeRecord(key, b) }
