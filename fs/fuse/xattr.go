package fuse

import (
	"context"
	"syscall"

	ebbfs "ebbfs.dev/ebbfs/fs"
)

// Extended attributes follow getxattr(2)'s size protocol: a zero-length
// destination asks for the size (go-fuse passes len(dest) == request size),
// and a destination too small for the value is ERANGE.

func (n *Node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	v, err := n.fsys.e.GetXattr(ctx, n.ino(), attr)
	if err != nil {
		return 0, n.fsys.toErrno(err, "getxattr", n.ino())
	}
	return copyOut(dest, v)
}

// POSIX ACLs are not enabled on the mount, and the kernel then hands their
// xattrs to the server like any other. Storing them would make getfacl
// report ACLs that nothing enforces, so they are refused.
const (
	aclAccess  = "system.posix_acl_access"
	aclDefault = "system.posix_acl_default"
)

func (n *Node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if attr == aclAccess || attr == aclDefault {
		return syscall.EOPNOTSUPP
	}
	if flags&^(ebbfs.XattrCreate|ebbfs.XattrReplace) != 0 || flags == ebbfs.XattrCreate|ebbfs.XattrReplace {
		return syscall.EINVAL
	}
	// go-fuse reuses the request buffer; the engine may keep the slice.
	v := append([]byte(nil), data...)
	return n.fsys.toErrno(n.fsys.e.SetXattr(keep(ctx), n.ino(), attr, v, flags), "setxattr", n.ino())
}

func (n *Node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.fsys.toErrno(n.fsys.e.RemoveXattr(keep(ctx), n.ino(), attr), "removexattr", n.ino())
}

func (n *Node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	names, err := n.fsys.e.ListXattr(ctx, n.ino())
	if err != nil {
		return 0, n.fsys.toErrno(err, "listxattr", n.ino())
	}
	size := 0
	for _, name := range names {
		size += len(name) + 1
	}
	buf := make([]byte, 0, size)
	for _, name := range names {
		buf = append(buf, name...)
		buf = append(buf, 0)
	}
	return copyOut(dest, buf)
}

// copyOut copies v into dest, or reports the size needed: with an empty
// dest (a size probe) it returns len(v); with a dest too small it returns
// len(v) and ERANGE.
func copyOut(dest, v []byte) (uint32, syscall.Errno) {
	if len(v) > 1<<30 {
		return 0, syscall.E2BIG
	}
	if len(dest) == 0 {
		return uint32(len(v)), 0
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}
