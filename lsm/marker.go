package lsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

const markerName = "CLEAN"

// marker is the clean-shutdown record written by Close at Dir/CLEAN. It is
// removed (and the removal synced) before Open writes anything, so its
// presence means Dir/pebble holds exactly journal Applied's state.
type marker struct {
	Format  int               `json:"format"`
	UUID    string            `json:"uuid"`
	Applied uint64            `json:"applied_seq"`
	Epoch   uint64            `json:"epoch"`
	Shipped map[string]string `json:"shipped"`
}

func readMarker(dir string) (*marker, error) {
	b, err := os.ReadFile(filepath.Join(dir, markerName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil || m.Format != 1 {
		return nil, fmt.Errorf("clean-shutdown marker is malformed")
	}
	return &m, nil
}

func removeMarker(dir string) error {
	err := os.Remove(filepath.Join(dir, markerName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(dir)
}

func writeMarker(dir string, m marker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, markerName), b)
}

// writeFileAtomic writes via temp file, fsync, rename, directory fsync.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
