package fuse

import (
	"context"
	"syscall"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirStream lists a directory in pages of readdirPage entries. Its
// offsets count the entries returned (1 after "."), as go-fuse's list
// stream does; the next page starts after the last name returned, so
// changes to the directory between pages skip or repeat no other entry.
// A seek to another offset (seekdir, rewinddir) lists again from the start
// and skips that many entries.
type dirStream struct {
	fsys        *fsys
	ino, parent uint64
	off         uint64 // entries returned so far: the offset of the last one
	page        []fuse.DirEntry
	after       string // the last name fetched from the engine
	end         bool   // the engine has no entries after after
	errno       syscall.Errno
}

var (
	_ fs.DirStream     = (*dirStream)(nil)
	_ fs.FileSeekdirer = (*dirStream)(nil)
)

// rewind goes back to before ".".
func (s *dirStream) rewind() {
	s.off, s.after, s.end, s.errno = 0, "", false, 0
	s.page = append(s.page[:0],
		fuse.DirEntry{Name: ".", Ino: s.ino, Mode: syscall.S_IFDIR},
		fuse.DirEntry{Name: "..", Ino: s.parent, Mode: syscall.S_IFDIR})
}

// fill appends a page from the engine.
func (s *dirStream) fill(ents []ebbfs.DirEntry) {
	if len(ents) < readdirPage {
		s.end = true
	}
	for _, de := range ents {
		s.after = de.Name
		if de.Name == "." || de.Name == ".." || de.Name == "" {
			continue
		}
		s.page = append(s.page, fuse.DirEntry{Name: de.Name, Ino: de.Ino, Mode: de.Mode & ebbfs.ModeType})
	}
}

func (s *dirStream) HasNext() bool {
	for len(s.page) == 0 && !s.end && s.errno == 0 {
		// A later READDIR's own context is not passed down to the
		// stream; this read changes nothing and takes as long as one
		// page's scan.
		ents, err := s.fsys.e.ReadDirPage(context.Background(), s.ino, s.after, readdirPage)
		if err != nil {
			s.errno = s.fsys.toErrno(err, "readdir", s.ino)
			break
		}
		s.fill(ents)
	}
	return len(s.page) > 0 || s.errno != 0
}

func (s *dirStream) Next() (fuse.DirEntry, syscall.Errno) {
	if len(s.page) == 0 {
		errno := s.errno
		if errno == 0 {
			errno = syscall.EIO // Next without HasNext
		}
		s.errno = 0 // the next READDIR tries again
		return fuse.DirEntry{}, errno
	}
	de := s.page[0]
	s.page = s.page[1:]
	s.off++
	de.Off = s.off
	return de, 0
}

func (s *dirStream) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off == s.off {
		return 0
	}
	s.rewind()
	for s.off < off {
		if !s.HasNext() {
			return 0 // past the end: the listing ends here
		}
		if _, errno := s.Next(); errno != 0 {
			return errno
		}
	}
	return 0
}

func (s *dirStream) Close() { s.page = nil }
