package fuse

import (
	"math"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSplitJoinNs(t *testing.T) {
	for _, ns := range []int64{0, 1, 999_999_999, 1e9, 1_700_000_000_123_456_789, -1, -1e9, -1_500_000_001, math.MaxInt64, math.MinInt64 + 1e9} {
		sec, nsec := splitNs(ns)
		if nsec >= 1e9 {
			t.Fatalf("splitNs(%d): nsec %d", ns, nsec)
		}
		if got := joinNs(sec, nsec); got != ns {
			t.Errorf("joinNs(splitNs(%d)) = %d (sec %d nsec %d)", ns, got, int64(sec), nsec)
		}
	}
	if sec, nsec := splitNs(-1); int64(sec) != -1 || nsec != 999_999_999 {
		t.Errorf("splitNs(-1) = %d, %d", int64(sec), nsec)
	}
}

// TestKillSetID checks the rule against Linux's: contents changed by a
// caller without CAP_FSETID, in the file's group or not; by one with it;
// and chown.
func TestKillSetID(t *testing.T) {
	const reg, dir = 0o100000, 0o040000
	member := creds{uid: 1000, gid: 100}
	suppl := creds{uid: 1000, gid: 5, groups: []uint32{7, 100}}
	outsider := creds{uid: 1000, gid: 5, groups: []uint32{7}}
	root := creds{fsetid: true}
	for _, c := range []struct {
		mode  uint32
		who   creds
		chown bool
		want  uint32
	}{
		{reg | 0o4755, member, false, reg | 0o755},
		{reg | 0o2755, member, false, reg | 0o755},   // group-execute: set-group-ID goes
		{reg | 0o2745, member, false, reg | 0o2745},  // in the group, no group-execute: stays
		{reg | 0o2745, suppl, false, reg | 0o2745},   // a supplementary group counts
		{reg | 0o2666, outsider, false, reg | 0o666}, // not in the group: goes
		{reg | 0o6666, outsider, false, reg | 0o666},
		{reg | 0o6666, member, false, reg | 0o2666},
		{reg | 0o6777, root, false, reg | 0o6777}, // CAP_FSETID keeps both
		{reg | 0o1777, outsider, false, reg | 0o1777},
		{reg | 0o644, outsider, false, reg | 0o644},
		{reg | 0o6666, root, true, reg | 0o2666}, // chown: set-user-ID always goes
		{reg | 0o6676, root, true, reg | 0o676},  // and set-group-ID with group-execute
		{reg | 0o2666, outsider, true, reg | 0o666},
		{reg | 0o2666, member, true, reg | 0o2666},
		{dir | 0o6777, outsider, true, dir | 0o6777}, // not for directories
	} {
		if got := killSetID(c.mode, 100, c.who, c.chown); got != c.want {
			t.Errorf("killSetID(%o, %+v, chown %v) = %o, want %o", c.mode, c.who, c.chown, got, c.want)
		}
	}
}

func TestParseStatus(t *testing.T) {
	var c creds
	parseStatus([]byte("Name:\tx\nGroups:\t4 24 27 \nCapEff:\t0000000000000010\n"), &c)
	if len(c.groups) != 3 || c.groups[2] != 27 || !c.fsetid {
		t.Fatalf("parsed %+v", c)
	}
	parseStatus([]byte("Groups:\nCapEff:\t0000000000000000\n"), &c)
	if len(c.groups) != 0 || c.fsetid {
		t.Fatalf("parsed %+v", c)
	}
}

func TestChmodChownUtimens(t *testing.T) {
	m := mount(t)
	p := m.path("f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := statOf(t, p)

	if err := os.Chmod(p, 0o640|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	st := statOf(t, p)
	if st.Mode != unix.S_IFREG|0o1640 {
		t.Fatalf("after chmod: %o", st.Mode)
	}
	if unix.TimespecToNsec(st.Ctim) < unix.TimespecToNsec(before.Ctim) {
		t.Fatal("ctime went back after chmod")
	}

	if os.Geteuid() == 0 {
		if err := os.Lchown(p, 1000, 2000); err != nil {
			t.Fatal(err)
		}
		st = statOf(t, p)
		if st.Uid != 1000 || st.Gid != 2000 {
			t.Fatalf("after chown: %d:%d", st.Uid, st.Gid)
		}
		if err := os.Lchown(p, -1, 3000); err != nil {
			t.Fatal(err)
		}
		if st = statOf(t, p); st.Uid != 1000 || st.Gid != 3000 {
			t.Fatalf("after chgrp: %d:%d", st.Uid, st.Gid)
		}
	}

	// Explicit times, including one before 1970 with a nanosecond part.
	atime := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	mtime := time.Date(1969, 12, 31, 23, 59, 58, 500_000_000, time.UTC)
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	st = statOf(t, p)
	if got := unix.TimespecToNsec(st.Atim); got != atime.UnixNano() {
		t.Errorf("atime %v, want %v", time.Unix(0, got).UTC(), atime)
	}
	if got := unix.TimespecToNsec(st.Mtim); got != mtime.UnixNano() {
		t.Errorf("mtime %v, want %v", time.Unix(0, got).UTC(), mtime)
	}

	// UTIME_NOW for mtime, UTIME_OMIT for atime.
	start := time.Now().Add(-2 * time.Second)
	ts = []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_NOW}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(2 * time.Second)
	st = statOf(t, p)
	if got := unix.TimespecToNsec(st.Atim); got != atime.UnixNano() {
		t.Errorf("UTIME_OMIT changed atime to %v", time.Unix(0, got))
	}
	if got := time.Unix(0, unix.TimespecToNsec(st.Mtim)); got.Before(start) || got.After(end) {
		t.Errorf("UTIME_NOW mtime %v not in [%v, %v]", got, start, end)
	}
	// Both UTIME_NOW (what touch does).
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, nil, 0); err != nil {
		t.Fatal(err)
	}
	st = statOf(t, p)
	if got := time.Unix(0, unix.TimespecToNsec(st.Atim)); got.Before(start) || got.After(end) {
		t.Errorf("utimes(NULL) atime %v", got)
	}

	// A write moves mtime and ctime forward.
	old := statOf(t, p)
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{unix.NsecToTimespec(0), unix.NsecToTimespec(0)}, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("again"), 0o644); err != nil {
		t.Fatal(err)
	}
	st = statOf(t, p)
	if unix.TimespecToNsec(st.Mtim) == 0 || unix.TimespecToNsec(st.Ctim) < unix.TimespecToNsec(old.Ctim) {
		t.Errorf("write did not update times: mtime %v ctime %v", st.Mtim, st.Ctim)
	}
}

func TestSetgidDirectoryInheritance(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	m := mount(t)
	d := m.path("shared")
	if err := os.Mkdir(d, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, 0, 4242); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(d, 0o2775); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("shared", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, m.path("shared", "f")); st.Gid != 4242 || st.Mode&unix.S_ISGID != 0 {
		t.Fatalf("file in setgid dir: gid %d mode %o", st.Gid, st.Mode)
	}
	if err := os.Mkdir(m.path("shared", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, m.path("shared", "sub")); st.Gid != 4242 || st.Mode&unix.S_ISGID == 0 {
		t.Fatalf("dir in setgid dir: gid %d mode %o", st.Gid, st.Mode)
	}
	if err := os.Symlink("x", m.path("shared", "sub", "ln")); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, m.path("shared", "sub", "ln")); st.Gid != 4242 {
		t.Fatalf("symlink in setgid dir: gid %d", st.Gid)
	}
	// Outside the setgid directory the caller's gid applies.
	if err := os.WriteFile(m.path("plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, m.path("plain")); st.Gid != uint32(os.Getegid()) {
		t.Fatalf("file outside: gid %d", st.Gid)
	}
}

func TestNonRootCallerIdentityAndPermissions(t *testing.T) {
	m := mount(t)
	if err := os.Chmod(m.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("secret"), []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := asUser(t, 1000, 1000, func() error {
		if err := os.WriteFile(m.path("mine"), []byte("u"), 0o644); err != nil {
			return err
		}
		_, err := os.ReadFile(m.path("secret"))
		return err
	})
	wantErrno(t, "unprivileged read of a 0600 root file", err, unix.EACCES)
	if st := statOf(t, m.path("mine")); st.Uid != 1000 || st.Gid != 1000 {
		t.Fatalf("file created by uid 1000: owner %d:%d", st.Uid, st.Gid)
	}
	err = asUser(t, 1000, 1000, func() error { return os.Chmod(m.path("secret"), 0o666) })
	wantErrno(t, "chmod of another user's file", err, unix.EPERM)
}

func TestWriteClearsSetuidForNonRoot(t *testing.T) {
	m := mount(t)
	if err := os.Chmod(m.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	p := m.path("prog")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, 0o6775); err != nil {
		t.Fatal(err)
	}
	// Root writing keeps the bits (CAP_FSETID).
	if err := appendTo(p, "# root\n"); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, p); st.Mode&0o7777 != 0o6775 {
		t.Fatalf("root write changed mode to %o", st.Mode&0o7777)
	}
	for _, flags := range []int{0, unix.O_DIRECT} {
		if err := unix.Chmod(p, 0o6775); err != nil {
			t.Fatal(err)
		}
		if err := asUser(t, 1000, 1000, func() error { return appendToFlags(p, "# user\n", flags) }); err != nil {
			t.Fatalf("write as owner (flags %#x): %v", flags, err)
		}
		if st := statOf(t, p); st.Mode&0o7777 != 0o775 {
			t.Fatalf("after unprivileged write (flags %#x): mode %o, want 0775", flags, st.Mode&0o7777)
		}
	}
}

func TestChownClearsSetuid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	m := mount(t)
	p := m.path("prog")
	if err := os.WriteFile(p, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ mode, want uint32 }{
		{0o6755, 0o755},  // set-user-ID and set-group-ID with group-exec go
		{0o6745, 0o2745}, // set-group-ID without group-exec stays
		{0o1755, 0o1755}, // sticky stays
	} {
		if err := os.Chmod(p, os.FileMode(c.mode&0o777)); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		if st := statOf(t, p); st.Mode&0o7777 != c.want {
			t.Errorf("chown of mode %o left %o, want %o", c.mode, st.Mode&0o7777, c.want)
		}
	}
	// Directories keep their bits.
	d := m.path("dir")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(d, 0o2775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, d); st.Mode&0o7777 != 0o2775 {
		t.Errorf("chown of setgid dir left %o", st.Mode&0o7777)
	}
}

func appendTo(p, s string) error { return appendToFlags(p, s, 0) }

// appendToFlags appends s with one write(2), opening with extra flags.
func appendToFlags(p, s string, flags int) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|flags, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(s)
	return err
}
