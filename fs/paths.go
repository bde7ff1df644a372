package fs

import (
	"path"
	"sort"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// maxPathsPerInode bounds the names reported for one hard-linked inode.
const maxPathsPerInode = 16

// direntName is a directory entry seen from its inode: where it lives.
type direntName struct {
	parent uint64
	name   string
}

// inodePaths returns every path of each inode in inos (a hard-linked
// file has several), sorted, at most maxPathsPerInode each; an inode no
// directory entry names (unlinked while open) has none. It scans the
// directory entries once: the metadata keeps no name under an inode, so
// this is for rare reports (damage), not for the I/O path.
func inodePaths(scan func(lower, upper []byte, f func(k, v []byte) error) error, inos map[uint64]bool) (map[uint64][]string, error) {
	dirs := map[uint64]direntName{}    // each directory's one name
	names := map[uint64][]direntName{} // the names of the inodes asked for
	lo, hi := schema.PrefixRange(schema.PDirent)
	err := scan(lo, hi, func(k, v []byte) error {
		parent, nm, err := schema.ParseDirentKey(k)
		if err != nil {
			return nil // fsck reports malformed keys
		}
		d, err := schema.UnmarshalDirent(v)
		if err != nil {
			return nil
		}
		if d.Type == ModeDir {
			dirs[d.Ino] = direntName{parent, nm}
		}
		if inos[d.Ino] && len(names[d.Ino]) < maxPathsPerInode {
			names[d.Ino] = append(names[d.Ino], direntName{parent, nm})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[uint64][]string, len(names))
	for ino, ns := range names {
		for _, n := range ns {
			out[ino] = append(out[ino], dirPath(dirs, n.parent)+"/"+n.name)
		}
		sort.Strings(out[ino])
	}
	return out, nil
}

// dirPath is the path of directory ino from the root ("" for the root),
// given each directory's parent and name; a chain that does not reach the
// root (a damaged tree) shows as "?" where it breaks.
func dirPath(dirs map[uint64]direntName, ino uint64) string {
	var parts []string
	for steps := 0; ino != RootIno; steps++ {
		d, ok := dirs[ino]
		if !ok || steps > len(dirs) {
			parts = append(parts, "?")
			break
		}
		parts = append(parts, d.name)
		ino = d.parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	if len(parts) == 0 {
		return ""
	}
	return "/" + path.Join(parts...)
}
