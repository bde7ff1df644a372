package fuse

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCopyOut(t *testing.T) {
	v := []byte("value")
	if n, errno := copyOut(nil, v); n != 5 || errno != 0 {
		t.Fatalf("probe: %d %v", n, errno)
	}
	if n, errno := copyOut(make([]byte, 4), v); n != 5 || errno != unix.ERANGE {
		t.Fatalf("small: %d %v", n, errno)
	}
	dst := make([]byte, 8)
	if n, errno := copyOut(dst, v); n != 5 || errno != 0 || string(dst[:5]) != "value" {
		t.Fatalf("fit: %d %v %q", n, errno, dst)
	}
	if n, errno := copyOut(nil, nil); n != 0 || errno != 0 {
		t.Fatalf("empty: %d %v", n, errno)
	}
}

func TestXattrs(t *testing.T) {
	m := mount(t)
	p := m.path("f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	val := []byte("hello, attribute")
	if err := unix.Setxattr(p, "user.greeting", val, 0); err != nil {
		t.Fatal(err)
	}
	// Size probe, then exact, then too small.
	if n, err := unix.Getxattr(p, "user.greeting", nil); err != nil || n != len(val) {
		t.Fatalf("getxattr size probe: %d %v", n, err)
	}
	buf := make([]byte, len(val))
	if n, err := unix.Getxattr(p, "user.greeting", buf); err != nil || !bytes.Equal(buf[:n], val) {
		t.Fatalf("getxattr: %q %v", buf[:n], err)
	}
	_, err := unix.Getxattr(p, "user.greeting", make([]byte, 3))
	wantErrno(t, "getxattr into a small buffer", err, unix.ERANGE)
	_, err = unix.Getxattr(p, "user.missing", buf)
	wantErrno(t, "getxattr missing", err, unix.ENODATA)

	// Empty value, binary value.
	if err := unix.Setxattr(p, "user.empty", nil, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Getxattr(p, "user.empty", buf); err != nil || n != 0 {
		t.Fatalf("empty value: %d %v", n, err)
	}
	bin := []byte{0, 1, 2, 0, 255}
	if err := unix.Setxattr(p, "user.bin", bin, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Getxattr(p, "user.bin", buf); err != nil || !bytes.Equal(buf[:n], bin) {
		t.Fatalf("binary value: %v %v", buf[:n], err)
	}

	// Flags.
	err = unix.Setxattr(p, "user.greeting", []byte("x"), unix.XATTR_CREATE)
	wantErrno(t, "XATTR_CREATE on existing", err, unix.EEXIST)
	err = unix.Setxattr(p, "user.nothere", []byte("x"), unix.XATTR_REPLACE)
	wantErrno(t, "XATTR_REPLACE on missing", err, unix.ENODATA)
	if err := unix.Setxattr(p, "user.greeting", []byte("bye"), unix.XATTR_REPLACE); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Getxattr(p, "user.greeting", buf); err != nil || string(buf[:n]) != "bye" {
		t.Fatalf("after replace: %q %v", buf[:n], err)
	}

	// List with the size probe.
	n, err := unix.Listxattr(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	list := make([]byte, n)
	if n, err = unix.Listxattr(p, list); err != nil {
		t.Fatal(err)
	}
	names := strings.Split(strings.TrimSuffix(string(list[:n]), "\x00"), "\x00")
	slices.Sort(names)
	if want := []string{"user.bin", "user.empty", "user.greeting"}; !slices.Equal(names, want) {
		t.Fatalf("listxattr: %q, want %q", names, want)
	}
	_, err = unix.Listxattr(p, make([]byte, 3))
	wantErrno(t, "listxattr into a small buffer", err, unix.ERANGE)

	if err := unix.Removexattr(p, "user.bin"); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "removexattr twice", unix.Removexattr(p, "user.bin"), unix.ENODATA)
	_, err = unix.Getxattr(p, "user.bin", buf)
	wantErrno(t, "getxattr removed", err, unix.ENODATA)

	// Directories and symlinks carry attributes too (user.* only on dirs).
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(m.path("d"), "user.d", []byte("dv"), 0); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Getxattr(m.path("d"), "user.d", buf); err != nil || string(buf[:n]) != "dv" {
		t.Fatalf("dir xattr: %q %v", buf[:n], err)
	}
	if os.Geteuid() == 0 {
		if err := unix.Setxattr(p, "trusted.t", []byte("tv"), 0); err != nil {
			t.Fatalf("trusted xattr as root: %v", err)
		}
	}
}

func TestUnsupportedFeatures(t *testing.T) {
	m := mount(t)
	p := m.path("f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A minimal valid POSIX ACL xattr (version 2, user::rw-, group::r--,
	// other::r--): refused, since ACLs would not be enforced.
	acl := []byte{2, 0, 0, 0,
		1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff,
		4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff,
		0x20, 0, 4, 0, 0xff, 0xff, 0xff, 0xff}
	err := unix.Setxattr(p, "system.posix_acl_access", acl, 0)
	wantErrno(t, "set POSIX ACL", err, unix.EOPNOTSUPP)
	// O_TMPFILE is supported (export_test.go).
}
