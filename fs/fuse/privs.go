package fuse

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Set-user-ID and set-group-ID on a change of contents or owner, as
// Linux's VFS clears them on a local filesystem (should_remove_suid,
// setattr_should_drop_sgid, chown_common):
//
//   - A write, truncate, fallocate or punch of a regular file by a caller
//     without CAP_FSETID clears set-user-ID, and set-group-ID when
//     group-execute is set or when the caller is not in the file's group.
//     A caller with CAP_FSETID clears nothing.
//   - A chown of a non-directory clears set-user-ID whoever the caller
//     is, and set-group-ID when group-execute is set or when the caller is
//     neither in the file's (old) group nor has CAP_FSETID.
//
// The kernel's FUSE client does part of this itself (it clears
// set-user-ID, and set-group-ID only with group-execute) and leaves the
// rest to the server, which is what this file does: killSetID is the one
// rule every path applies, with the caller's groups and capabilities read
// from /proc.

// capFsetid is CAP_FSETID's bit in /proc's CapEff.
const capFsetid = 4

// creds is what the rules need to know of the caller.
type creds struct {
	uid, gid uint32
	groups   []uint32 // supplementary groups
	fsetid   bool     // CAP_FSETID in the effective set
}

// inGroup reports whether the caller is in group gid (its fsgid or one of
// its supplementary groups, as in_group_p).
func (c creds) inGroup(gid uint32) bool {
	if c.gid == gid {
		return true
	}
	for _, g := range c.groups {
		if g == gid {
			return true
		}
	}
	return false
}

// callerCreds returns the credentials of the thread that made the
// request: uid and gid from the request (the kernel sends fsuid and
// fsgid), supplementary groups and CAP_FSETID from /proc/<tid>/status.
// When /proc cannot tell (the thread is gone, or a request of the
// kernel's own), uid 0 counts as capable and no supplementary groups are
// assumed.
func callerCreds(ctx context.Context) creds {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return creds{fsetid: true}
	}
	cr := creds{uid: c.Uid, gid: c.Gid, fsetid: c.Uid == 0}
	if c.Pid == 0 {
		return cr
	}
	data, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(c.Pid), 10) + "/status")
	if err != nil {
		return cr
	}
	parseStatus(data, &cr)
	return cr
}

// parseStatus reads the Groups and CapEff lines of a /proc status file
// into c.
func parseStatus(data []byte, c *creds) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Groups":
			c.groups = c.groups[:0]
			for _, f := range strings.Fields(val) {
				if g, err := strconv.ParseUint(f, 10, 32); err == nil {
					c.groups = append(c.groups, uint32(g))
				}
			}
		case "CapEff":
			if caps, err := strconv.ParseUint(val, 16, 64); err == nil {
				c.fsetid = caps&(1<<capFsetid) != 0
			}
		}
	}
}

// killSetID returns mode (permission bits and type) after the rules
// above, for a file of group gid changed by c: its owner (chown) or its
// contents.
func killSetID(mode, gid uint32, c creds, chown bool) uint32 {
	if mode&(ebbfs.ModeSetuid|ebbfs.ModeSetgid) == 0 {
		return mode
	}
	dropGid := mode&ebbfs.ModeSetgid != 0 && (mode&0o010 != 0 || !(c.fsetid || c.inGroup(gid)))
	if chown {
		if mode&ebbfs.ModeType == ebbfs.ModeDir {
			return mode
		}
		mode &^= ebbfs.ModeSetuid
	} else {
		if c.fsetid || mode&ebbfs.ModeType != ebbfs.ModeRegular {
			return mode
		}
		mode &^= ebbfs.ModeSetuid
	}
	if dropGid {
		mode &^= ebbfs.ModeSetgid
	}
	return mode
}

// mayHaveSetID reports whether the mode last seen for n has a set-ID bit,
// the cheap test before the rules are applied to a write.
func (n *Node) mayHaveSetID() bool {
	return n.mode.Load()&(ebbfs.ModeSetuid|ebbfs.ModeSetgid) != 0
}

// dropPrivs applies the rules for a change of n's contents by the caller
// of ctx, before the change. The kernel has usually cleared set-user-ID
// with a SETATTR of its own by then; this clears what it leaves (and
// everything, on paths where it sends nothing).
func (n *Node) dropPrivs(ctx context.Context, op string) syscall.Errno {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	a, err := n.fsys.e.GetAttr(ctx, n.ino())
	if err != nil {
		return n.fsys.toErrno(err, op, n.ino())
	}
	n.remember(a)
	killed := killSetID(a.Mode, a.Gid, callerCreds(ctx), false)
	if killed == a.Mode {
		return 0
	}
	a, err = n.fsys.e.SetAttr(ctx, n.ino(), ebbfs.SetAttr{Valid: ebbfs.SetMode, Mode: killed & 0o7777})
	if err != nil {
		return n.fsys.toErrno(err, op, n.ino())
	}
	n.remember(a)
	return 0
}

// setattrKill adds to sa what the rules clear for a SETATTR that changes
// the owner or the size (a truncate) of n, given the caller of ctx.
func (n *Node) setattrKill(ctx context.Context, sa *ebbfs.SetAttr) syscall.Errno {
	chown := sa.Valid&(ebbfs.SetUid|ebbfs.SetGid) != 0
	if !chown && sa.Valid&ebbfs.SetSize == 0 {
		return 0
	}
	cur, err := n.fsys.e.GetAttr(ctx, n.ino())
	if err != nil {
		return n.fsys.toErrno(err, "setattr", n.ino())
	}
	mode := cur.Mode
	if sa.Valid&ebbfs.SetMode != 0 {
		mode = mode&ebbfs.ModeType | sa.Mode
	}
	if mode&(ebbfs.ModeSetuid|ebbfs.ModeSetgid) == 0 {
		return 0
	}
	c := callerCreds(ctx)
	killed := killSetID(mode, cur.Gid, c, chown)
	if sa.Valid&ebbfs.SetSize != 0 {
		killed = killSetID(killed, cur.Gid, c, false)
	}
	if killed != mode {
		sa.Valid |= ebbfs.SetMode
		sa.Mode = killed & 0o7777
	}
	return 0
}
