package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/mountinfo"
	"ebbfs.dev/ebbfs/lsm"
)

// notRunning is `status --json` when no process answers.
type notRunning struct {
	Running    bool       `json:"running"`
	LeftBehind []leftover `json:"left_behind"`
}

// leftover is one thing a process that did not stop cleanly left
// behind, and how to recover from it.
type leftover struct {
	What    string `json:"what"` // "dead_mount", "stale_socket", "lease", "store_unreadable"
	Path    string `json:"path,omitempty"`
	Detail  string `json:"detail"`
	Recover string `json:"recover,omitempty"`
}

// leftBehindStoreTimeout bounds the lease read of `status` when nothing
// runs (a store that does not answer must not hang the command).
const leftBehindStoreTimeout = 10 * time.Second

// leftBehind looks for what a crashed writer or reader of c left behind:
// a FUSE mount with no process behind it, the admin socket, and a lease
// that was not released.
func leftBehind(ctx context.Context, c *config.Config) []leftover {
	left := []leftover{}
	if mounts, err := mountinfo.Read(); err == nil {
		for _, m := range mounts {
			if !strings.Contains(m.FSType, "ebbfs") || (m.Source != c.Path && m.Mountpoint != c.Mount.Path) {
				continue
			}
			if mountinfo.DeadFUSE(m.Mountpoint) {
				left = append(left, leftover{What: "dead_mount", Path: m.Mountpoint,
					Detail:  "the mount's process is gone: every access fails with 'Transport endpoint is not connected'",
					Recover: fmt.Sprintf("fusermount3 -u %s (or umount -l %s), then start ebbfs again", m.Mountpoint, m.Mountpoint)})
			} else {
				left = append(left, leftover{What: "mount", Path: m.Mountpoint,
					Detail: "mounted and answering, but no admin endpoint answers for this configuration (another configuration file, or [admin] disabled?)"})
			}
		}
	}
	if c.Admin.UnixSocket != "" {
		if _, err := os.Stat(c.Admin.UnixSocket); err == nil {
			left = append(left, leftover{What: "stale_socket", Path: c.Admin.UnixSocket,
				Detail:  "the admin socket exists but nothing listens on it",
				Recover: "the next 'ebbfs run' replaces it"})
		}
	}
	return append(left, leftLease(ctx, c)...)
}

// leftLease reports a lease that its holder did not release.
func leftLease(ctx context.Context, c *config.Config) []leftover {
	ctx, cancel := context.WithTimeout(ctx, leftBehindStoreTimeout)
	defer cancel()
	st, err := openStore(ctx, c)
	var l lsm.Lease
	found := false
	if err == nil {
		l, found, err = lsm.ReadLease(ctx, st)
	}
	if err != nil {
		return []leftover{{What: "store_unreadable", Detail: fmt.Sprintf("could not read %s: %v", lsm.LeaseKey, err)}}
	}
	if !found || l.Released {
		return nil
	}
	host, _ := os.Hostname()
	age := time.Since(l.Heartbeat).Round(time.Second)
	lo := leftover{What: "lease", Path: lsm.LeaseKey}
	switch alive, known := l.HolderAlive(host); {
	case known && alive:
		lo.Detail = fmt.Sprintf("held by %q (pid %d on this host, still running) since a heartbeat %s ago; its admin endpoint does not answer", l.Holder, l.PID, age)
		lo.Recover = fmt.Sprintf("look at pid %d (kill it if it hangs); the next 'ebbfs run' then takes the lease over", l.PID)
	case known:
		lo.Detail = fmt.Sprintf("not released: its holder %q (pid %d on this host) is dead; last heartbeat %s ago (epoch %d)", l.Holder, l.PID, age, l.Epoch)
		lo.Recover = "the next 'ebbfs run' on this host takes it over at once; everything fsynced before the crash is in the store"
	default:
		lo.Detail = fmt.Sprintf("held by %q (pid %d on host %s), last heartbeat %s ago (epoch %d)", l.Holder, l.PID, l.Host, age, l.Epoch)
		lo.Recover = "if that writer is gone, 'ebbfs run --take-over' takes the lease at once; otherwise a writer here waits until the heartbeat is older than the lease TTL"
	}
	return []leftover{lo}
}

func printLeftBehind(w io.Writer, left []leftover) {
	fmt.Fprintln(w, "no ebbfs process answers for this configuration")
	if len(left) == 0 {
		fmt.Fprintln(w, "nothing left behind: the last process stopped cleanly (or none ran)")
		return
	}
	fmt.Fprintln(w, "left behind by a process that did not stop cleanly:")
	for _, l := range left {
		where := ""
		if l.Path != "" {
			where = " " + l.Path
		}
		fmt.Fprintf(w, "  %s%s: %s\n", strings.ReplaceAll(l.What, "_", " "), where, l.Detail)
		if l.Recover != "" {
			fmt.Fprintf(w, "    to recover: %s\n", l.Recover)
		}
	}
}
