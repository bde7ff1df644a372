package fuse

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/internal/worker"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Name is the filesystem type suffix: /proc/mounts shows "fuse.ebbfs".
const Name = "ebbfs"

// Defaults for MountOptions.
const (
	DefaultTimeout = time.Second // entry and attribute cache timeout
	maxWrite       = 1 << 20     // largest READ/WRITE request
	maxReadAhead   = 1 << 20     // the kernel caps this at its own maximum
)

// MountOptions configure Mount. The zero value mounts for the calling user
// only, without kernel permission checks; DefaultMountOptions gives the
// documented defaults.
type MountOptions struct {
	// AllowOther lets users other than the mounting one use the mount
	// (allow_other). Needs root or user_allow_other in /etc/fuse.conf.
	AllowOther bool
	// DefaultPermissions makes the kernel check permissions from the mode,
	// owner and group of each inode (default_permissions). ebbfs does no
	// permission checks of its own, so without it every user who can reach
	// the mount can do anything.
	DefaultPermissions bool
	// FsName is the source shown in /proc/mounts and df (default "ebbfs").
	FsName string
	// Debug logs every FUSE request and reply at debug level.
	Debug bool
	// EntryTimeout and AttrTimeout are how long the kernel may cache names
	// and attributes (default DefaultTimeout each).
	EntryTimeout time.Duration
	AttrTimeout  time.Duration
	// Logger receives errors mapped to EIO and, with Debug, the request
	// trace (default slog.Default()).
	Logger *slog.Logger
	// Ops, if set, records every request's count, failures, bytes and
	// latency by operation (FUSEOps), for /metrics and the monitor.
	Ops *stats.Ops
	// MaxNodes bounds the inodes the kernel holds through this mount
	// (and the server keeps a node for): past it the oldest names are
	// invalidated so the kernel forgets them (nodelimit.go). 0:
	// DefaultMaxNodes; negative: no bound.
	MaxNodes int
}

// DefaultMountOptions returns the defaults of DESIGN section 11: started as
// root, the mount behaves like a shared local filesystem (allow_other);
// kernel permission checks are always on.
func DefaultMountOptions() MountOptions {
	return MountOptions{
		AllowOther:         os.Geteuid() == 0,
		DefaultPermissions: true,
		FsName:             Name,
		EntryTimeout:       DefaultTimeout,
		AttrTimeout:        DefaultTimeout,
		MaxNodes:           DefaultMaxNodes,
	}
}

// Mount mounts e at mountpoint and serves it until the returned server is
// unmounted (Server.Unmount, or umount(8) followed by Server.Wait). The
// caller closes the engine after that. When the engine is read-only the
// mount is too.
func Mount(e *ebbfs.Engine, mountpoint string, o MountOptions) (*Server, error) {
	srv, _, err := mountFS(e, mountpoint, o)
	return srv, err
}

// Server is a mounted filesystem: go-fuse's server, whose request loop
// runs in a worker of the mount's own. When the kernel ends the mount, that
// worker stops the node limit and a replica's notifier, so Wait and
// Unmount return only once every goroutine the mount started is gone.
type Server struct {
	*fuse.Server
	serve *worker.Worker
}

// Unmount unmounts the filesystem and waits for the mount's workers.
func (s *Server) Unmount() error {
	if err := s.Server.Unmount(); err != nil {
		return err
	}
	s.Wait()
	return nil
}

// Wait waits until the mount is gone (Unmount, or umount(8)) and the
// mount's workers have stopped.
func (s *Server) Wait() { <-s.serve.Done() }

// mountFS is Mount, also returning the mount's shared state (tests).
func mountFS(e *ebbfs.Engine, mountpoint string, o MountOptions) (*Server, *fsys, error) {
	if e == nil {
		return nil, nil, errors.New("fuse: nil engine")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.FsName == "" {
		o.FsName = Name
	}
	if o.EntryTimeout <= 0 {
		o.EntryTimeout = DefaultTimeout
	}
	if o.AttrTimeout <= 0 {
		o.AttrTimeout = DefaultTimeout
	}
	entry, attr := o.EntryTimeout, o.AttrTimeout

	root := os.Geteuid() == 0
	var opts []string
	if !root {
		// fusermount3 turns it into the mount flag; see DirectMountFlags.
		opts = append(opts, "noatime")
	}
	if o.DefaultPermissions {
		opts = append(opts, "default_permissions")
	}
	if e.ReadOnly() && !e.Promotable() {
		// A standby's mount stays read-write in the kernel: the engine
		// answers writes with EROFS until it is promoted (fs/standby.go).
		opts = append(opts, "ro")
	}
	mo := fuse.MountOptions{
		AllowOther:   o.AllowOther,
		Options:      opts,
		FsName:       o.FsName,
		Name:         Name,
		MaxWrite:     maxWrite,
		MaxReadAhead: maxReadAhead,
		Debug:        o.Debug,
		// Reads return decrypted bytes, never a file descriptor, so
		// go-fuse's splice path has nothing to splice; left on, it would
		// take a pipe and log a failed attempt for every 1 MiB read.
		DisableSplice: true,
		// As root, mount(2) directly; fusermount3 is the fallback (and
		// the only way for other users).
		DirectMount: root,
		// The engine does not update atime on reads, so say so: noatime,
		// plus the nosuid,nodev that fusermount3 would apply.
		DirectMountFlags: syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOATIME,
		// File handles (name_to_handle_at, NFS re-export) work across
		// remounts: node ids are inode numbers (export.go).
		ExtraCapabilities: fuse.CAP_EXPORT_SUPPORT,
		// The writeback cache stays off: with it the kernel holds dirty
		// pages and becomes the authority for size and mtime, which the
		// engine (and the NBD server writing the same files) could then
		// no longer keep consistent.
	}
	if o.Debug {
		mo.Logger = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	}
	f := &fsys{e: e, log: log}
	if o.MaxNodes >= 0 {
		limit := o.MaxNodes
		if limit == 0 {
			limit = DefaultMaxNodes
		}
		f.limit = startNodeLimit(f, limit)
	}
	rootNode := &Node{fsys: f}
	// What the writer changes reaches the kernel's caches, through a
	// worker that stops when the mount is gone: on a replica, a standby
	// or a writer that may hand over and follow, the journals it
	// follows; on a writer, what a checkpoint restore changes
	// (fs/restore.go).
	f.notify = startNotifier(f)
	srv, err := mountTimed(mountpoint, rootNode, f, o.Ops, &fs.Options{
		MountOptions:   mo,
		EntryTimeout:   &entry,
		AttrTimeout:    &attr,
		RootStableAttr: &fs.StableAttr{Ino: ebbfs.RootIno},
		ExternalNodeID: true,
		// Modes are the engine's; a mode of 0 stays 0.
		NullPermissions: true,
		Logger:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	})
	if err != nil {
		f.stopWorkers()
		return nil, nil, err
	}
	f.root = rootNode
	e.SetFollowObserver(f.invalidate)
	raiseReadahead(mountpoint, log)
	return srv, f, nil
}

// stopWorkers stops the node limit and the notifier, if running.
func (f *fsys) stopWorkers() {
	if f.limit != nil {
		f.limit.close()
	}
	if f.notify != nil {
		f.notify.close()
	}
}

// mountTimed is fs.Mount with the request recorder (if any) around the node
// bridge. The request loop runs in a worker that stops f's workers when
// the mount is gone.
func mountTimed(dir string, root fs.InodeEmbedder, f *fsys, ops *stats.Ops, opts *fs.Options) (*Server, error) {
	raw := fs.NewNodeFS(root, opts)
	if ops != nil {
		raw = newTimedFS(raw, ops)
	}
	srv, err := fuse.NewServer(raw, dir, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	s := &Server{Server: srv}
	s.serve = worker.Start("fuse-serve", nil, func(*worker.Worker) {
		srv.Serve()
		f.stopWorkers()
	})
	if err := srv.WaitMount(); err != nil {
		// Unmount ends the request loop if the kernel mounted it;
		// otherwise the loop ends with the device's first failed read.
		if srv.Unmount() == nil {
			s.Wait()
		}
		return nil, err
	}
	return s, nil
}

// readaheadKiB is the kernel readahead window asked for the mount. The
// kernel starts a FUSE mount at 128 KiB whatever the INIT reply says; a
// larger window turns sequential reads into 1 MiB requests, which the
// engine serves with one ranged GET per run of frames. At 2 MiB the kernel
// has the next request under way while the engine answers one, so both
// cores of a small machine work; at 4 MiB and more the requests crowd out
// the reader (the measurements are in bench/README.md, "Figures behind
// the code's constants").
const readaheadKiB = 2048

// raiseReadahead sets the mount's backing-device readahead (root only; a
// failure costs only speed, so it is logged at debug level).
func raiseReadahead(mountpoint string, log *slog.Logger) {
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		log.Debug("fuse: readahead: stat", "err", err)
		return
	}
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(path, []byte(strconv.Itoa(readaheadKiB)), 0o644); err != nil {
		log.Debug("fuse: readahead", "path", path, "err", err)
	}
}
