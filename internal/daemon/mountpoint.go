package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"ebbfs.dev/ebbfs/fs/fuse"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/mountinfo"
)

// unmount detaches the mount; a busy mount is detached lazily (the kernel
// finishes it once the last open file is closed).
func unmount(srv interface{ Unmount() error }, mp string, done <-chan struct{}, log *slog.Logger) {
	err := srv.Unmount()
	if err == nil {
		return
	}
	select {
	case <-done:
		return // unmounted meanwhile by umount(8)
	default:
	}
	log.Warn("unmount failed; detaching lazily (open files keep it alive; signal again to stop now)", "mountpoint", mp, "err", err)
	if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
		log.Error("lazy unmount failed", "mountpoint", mp, "err", err)
	}
}

// prepareMountpoint checks that the mountpoint is a directory and not
// already mounted. A dead ebbfs mount left by a killed writer is detached.
func prepareMountpoint(p string, log *slog.Logger) (string, error) {
	if err := os.MkdirAll(p, 0o755); err != nil && !errors.Is(err, syscall.ENOTCONN) {
		if _, serr := os.Stat(p); !errors.Is(serr, syscall.ENOTCONN) {
			return "", fmt.Errorf("mountpoint: %w", err)
		}
	}
	mp, err := mountinfo.Canonical(p)
	if err != nil {
		return "", err
	}
	m, mounted, err := mountinfo.Find(mp)
	if err != nil {
		return "", fmt.Errorf("reading the mount table: %w", err)
	}
	if mounted {
		if m.FSType == "fuse."+fuse.Name && mountinfo.DeadFUSE(mp) {
			log.Warn("detaching a dead ebbfs mount left by a previous writer", "mountpoint", mp)
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				return "", fmt.Errorf("mountpoint %s holds a dead ebbfs mount that could not be detached: %w", mp, err)
			}
		} else if m.FSType == "fuse."+fuse.Name {
			return "", fmt.Errorf("mountpoint %s is already mounted by a running ebbfs (see 'ebbfs status')", mp)
		} else {
			return "", fmt.Errorf("mountpoint %s is already mounted (%s from %s)", mp, m.FSType, m.Source)
		}
	}
	fi, err := os.Stat(mp)
	if err != nil {
		return "", fmt.Errorf("mountpoint: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("mountpoint %s is not a directory", mp)
	}
	return mp, nil
}

// listenUnixSocket listens on a socket path, replacing a stale socket file
// but never a live socket or another kind of file.
func listenUnixSocket(p string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(p); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", p)
		}
		if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("another process is serving %s", p)
		}
		if err := os.Remove(p); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("unix", p)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(p, mode); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// goHeadroom is what the Go memory limit allows beyond the plaintext
// cache: as fast as a larger headroom, and a lower peak RSS
// (bench/README.md, "Figures behind the code's constants"). The
// buffers segments are built in are outside the Go heap now (at most
// 144 MiB, fs.segBufsMax), but the limit is not lowered by them: the
// dirty data and repack's jobs (each up to 128 MiB) still need the
// room, and a limit the live heap reaches makes the collector run
// without pause.
const goHeadroom = 320 << 20

// limitMemory bounds the Go heap to the plaintext cache plus room for the
// dirty data (fs.Options.DirtyLimit, 128 MiB), repack's jobs and Pebble,
// so that the garbage collector works harder before the process grows
// past what the configuration promises. GOMEMLIMIT in the environment
// wins.
func limitMemory(cacheBytes int64, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := cacheBytes + goHeadroom
	debug.SetMemoryLimit(limit)
	log.Debug("memory limit", "bytes", limit)
}

// removeIfSocket removes p if it is a socket.
func removeIfSocket(p string) error {
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil
	}
	return os.Remove(p)
}

// mountSource is the source the mount shows in /proc/mounts, findmnt and
// df: the absolute path of the config file, which is also what
// "mount -t fuse.ebbfs CONFIG MOUNTPOINT" and an fstab line name, so tools
// (and test suites) identify the mount by it. A config not loaded from a
// file shows as "ebbfs".
func mountSource(c *config.Config) string {
	if c.Path == "" {
		return fuse.Name
	}
	return c.Path
}
