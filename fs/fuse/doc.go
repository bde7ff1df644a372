// Package fuse binds the ebbfs engine (package fs) to the kernel with
// go-fuse's node API. It is deliberately thin: every FUSE operation becomes
// one or a few engine calls, and engine errors become errno values in one
// place (errno.go).
//
// Decisions, and why:
//
//   - Permission checks are the kernel's (default_permissions, on by
//     default). The engine does none, so a mount without it lets anyone who
//     can reach it do anything. As root the mount also gets allow_other
//     (DESIGN section 11). DirectMount is used as root (fusermount3 is the
//     fallback), with the usual nosuid,nodev, and noatime because the
//     engine does not update atime on reads.
//   - The POSIX rules the kernel leaves to a FUSE server are applied here:
//     new inodes get the caller's uid and gid, or the parent's gid when the
//     parent is set-group-ID (new directories then inherit the bit); chown
//     of a non-directory drops set-user-ID, and set-group-ID when
//     group-execute is set, whoever the caller; a write, fallocate or hole
//     punch by a non-root caller drops the same bits first. (Linux 6.x already sends its own SETATTR
//     for the last two; doing it here as well keeps the rule on every path.)
//   - Attribute and entry timeouts are 1 s; every op that changes attributes
//     returns the engine's fresh ones. Negative lookups are not cached.
//   - The writeback cache is off and open does not ask to keep the page
//     cache: the engine stays the authority for size and mtime, and data
//     written by the NBD server is seen at the next open (or attribute
//     refresh, with auto_inval_data) rather than never.
//   - O_APPEND writes use the offset the kernel sends, which is its file
//     size taken under the inode lock (verified: WRITE arrives at the end of
//     file). Recomputing it from the engine would misplace shared-mmap
//     writeback, which the kernel may send through an O_APPEND handle.
//   - Every open and create registers with the engine (Open) and every
//     release ends it (Release, never cancelled), so an unlinked file stays
//     readable until its last close and is deleted then.
//   - fsync and fsyncdir run Engine.Sync: nothing when the inode has
//     nothing to make durable, otherwise the engine's barrier (shared with
//     the fsyncs that overlap it); flush (close) does nothing, since
//     writes are already in the engine.
//   - Interrupts (interrupt.go): a call may return EINTR only while it has
//     changed nothing. fsync, fdatasync, fsyncdir and msync run the barrier
//     to its end and return its real result; every namespace and attribute
//     change runs to its end; write and copy_file_range honour an
//     interrupt only after WriteInterruptAfter (a fatal signal at once)
//     and return the bytes already copied; reads and lookups may be cut
//     short. Release ignores
//     interrupts.
//   - Engine errors outside the documented sentinels become EIO and are
//     logged once, at error level, with the operation and inode; ENOSPC and
//     EDQUOT from the local cache pass through.
//   - Not supported: O_TMPFILE (EOPNOTSUPP), RENAME_WHITEOUT (EINVAL),
//     fallocate modes other than allocate, keep-size allocate and punch hole
//     (EOPNOTSUPP), POSIX ACLs (not enabled; their xattrs are refused with
//     EOPNOTSUPP rather than stored unenforced),
//     and file locks beyond the kernel's local ones.
package fuse
