package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// loopbackFSType is what the passthrough mount shows in /proc/mounts.
const loopbackFSType = "fuse.mountbench"

// serveLoopback mounts a plain go-fuse passthrough of src at mp and serves
// it until it is unmounted (umount, or SIGTERM/SIGINT). This is the
// harness's child mode (-serve-loopback).
//
// The options mirror ebbfs's fs/fuse.Mount so that the comparison is of the
// filesystems and not of the mount: 1 MiB MaxWrite and MaxReadAhead, a
// 2 MiB kernel readahead window (loopbackReadaheadKiB), no writeback cache,
// 1 s entry and attribute timeouts, default_permissions (and allow_other)
// as root, mounted directly with nosuid,nodev,noatime.
// The stock LoopbackNode opens files without FOPEN_KEEP_CACHE, so unlike
// ebbfs it loses the page cache at every open.
//
// Unless kernelPassthrough, CAP_PASSTHROUGH is withheld: go-fuse's loopback
// would otherwise hand the kernel its backing file descriptors (Linux 6.9+,
// as root) and reads and writes would bypass the server altogether, which
// measures the disk again rather than a FUSE server. go-fuse still tries
// to splice each read from the backing file into /dev/fuse (its default),
// which works where the reply and a page fit in a pipe of
// /proc/sys/fs/pipe-max-size (1 MiB by default): the 4 KiB random reads.
// A 1 MiB read's splice is refused ("trySplice: ... max pipe size" in the
// child's log), and it is read with pread and sent with writev, as
// ebbfs's replies are.
func serveLoopback(src, mp string, kernelPassthrough bool) error {
	root, err := fs.NewLoopbackRoot(src)
	if err != nil {
		return err
	}
	asRoot := os.Geteuid() == 0
	var opts []string
	if !asRoot {
		opts = append(opts, "noatime")
	}
	opts = append(opts, "default_permissions")
	timeout := time.Second
	var disabled uint64
	if !kernelPassthrough {
		disabled = fuse.CAP_PASSTHROUGH
	}
	srv, err := fs.Mount(mp, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:           asRoot,
			Options:              opts,
			FsName:               "mountbench-loopback",
			Name:                 "mountbench",
			MaxWrite:             1 << 20,
			MaxReadAhead:         1 << 20,
			DirectMount:          asRoot,
			DirectMountFlags:     syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOATIME,
			DisabledCapabilities: disabled,
		},
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
	})
	if err != nil {
		return fmt.Errorf("mount %s: %w", mp, err)
	}
	if err := setReadahead(mp, loopbackReadaheadKiB); err != nil {
		fmt.Fprintf(os.Stderr, "mountbench loopback: %v (the kernel's 128 KiB stays)\n", err)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-sigs:
		if err := srv.Unmount(); err != nil {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
		<-done
	}
	return nil
}

// loopbackReadaheadKiB is the kernel readahead window of the passthrough's
// mount: ebbfs's (fs/fuse readaheadKiB), which ebbfs sets on its own
// mount as root. The kernel starts a FUSE mount at 128 KiB.
const loopbackReadaheadKiB = 2048

// setReadahead sets the readahead window of the mount at mp (its backing
// device's read_ahead_kb; root only).
func setReadahead(mp string, kib int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(mp, &st); err != nil {
		return err
	}
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(path, []byte(strconv.Itoa(kib)), 0o644)
}
