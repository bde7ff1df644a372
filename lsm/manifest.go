package lsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"ebbfs.dev/ebbfs/internal/keys"
)

const manifestMagic = "EBM1"

// Manifest is the decoded plaintext of a manifest object: a Pebble
// checkpoint described by the objects that hold its files.
type Manifest struct {
	Format  int       `json:"format"` // 1
	Seq     uint64    `json:"seq"`    // covered journal sequence; also the object's name
	Epoch   uint64    `json:"epoch"`  // writer epoch that published it
	Created time.Time `json:"created"`
	// Tables are the checkpoint's shipped data files (.sst, .blob).
	Tables []ManifestTable `json:"tables"`
	// Files are the checkpoint's small files, inline: MANIFEST-*, OPTIONS-*,
	// marker.* and (normally empty) WAL files.
	Files []ManifestFile `json:"files"`
}

// ManifestTable maps a local Pebble file to the object that holds it.
type ManifestTable struct {
	Name   string `json:"name"`   // local file name, e.g. "000123.sst"
	Object string `json:"object"` // e.g. "meta/sst/0000000000000003-000123.sst"
	Size   int64  `json:"size"`   // plaintext bytes
}

// ManifestFile is a small checkpoint file carried inline.
type ManifestFile struct {
	Name string `json:"name"`
	Data []byte `json:"data"`
}

// validLocalName accepts a plain file name (no directories, no dot names).
func validLocalName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\\\x00") && path.Base(n) == n
}

func encodeManifest(m *Manifest) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte(manifestMagic), b...), nil
}

// DecodeManifest parses and validates a manifest plaintext container.
func DecodeManifest(plain []byte) (*Manifest, error) {
	if len(plain) < len(manifestMagic) || string(plain[:len(manifestMagic)]) != manifestMagic {
		return nil, errors.New("bad manifest header")
	}
	var m Manifest
	if err := json.Unmarshal(plain[len(manifestMagic):], &m); err != nil {
		return nil, fmt.Errorf("manifest body: %v", err)
	}
	if m.Format != 1 {
		return nil, fmt.Errorf("manifest format %d, this build reads 1", m.Format)
	}
	seen := map[string]bool{}
	for _, t := range m.Tables {
		if !validLocalName(t.Name) || seen[t.Name] || !strings.HasPrefix(t.Object, sstPrefix) || t.Size < 0 {
			return nil, fmt.Errorf("manifest table entry %q -> %q is invalid", t.Name, t.Object)
		}
		seen[t.Name] = true
	}
	for _, f := range m.Files {
		if !validLocalName(f.Name) || seen[f.Name] {
			return nil, fmt.Errorf("manifest file entry %q is invalid", f.Name)
		}
		seen[f.Name] = true
	}
	return &m, nil
}

func manifestAAD(k *keys.Keys, seq uint64) []byte {
	a := aadFor(k, "manifest", "")
	for i := 7; i >= 0; i-- {
		a = append(a, byte(seq>>(8*i)))
	}
	return a
}

func openManifest(k *keys.Keys, seq uint64, sealed []byte) (*Manifest, error) {
	name := manifestKey(seq)
	plain, err := k.Meta.Open(manifestAAD(k, seq), sealed)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	m, err := DecodeManifest(plain)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	if m.Seq != seq {
		return nil, fmt.Errorf("%w: %s: holds sequence %d", ErrCorrupt, name, m.Seq)
	}
	return m, nil
}
