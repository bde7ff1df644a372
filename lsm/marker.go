package lsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"ebbfs.dev/ebbfs/internal/fileutil"
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
	return fileutil.SyncDir(dir)
}

func writeMarker(dir string, m marker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return fileutil.WriteAtomic(filepath.Join(dir, markerName), b, fileutil.Options{Durable: true})
}
