package main

import (
	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/mounthelper"
)

func newMountHelperCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mount-helper CONFIG MOUNTPOINT [-o OPTIONS]",
		Short: "The mount.fuse.ebbfs calling convention of mount(8)",
		Long: `mount -t fuse.ebbfs CONFIG MOUNTPOINT (or the fstab line
  /etc/ebbfs/ebbfs.toml /mnt/ebbfs fuse.ebbfs defaults,_netdev 0 0)
makes mount(8) run "mount.fuse.ebbfs CONFIG MOUNTPOINT -o OPTIONS". That
program (a symlink to ebbfs) starts "ebbfs run -c CONFIG" detached, logging
to ebbfs.log in the cache directory, and returns once the mount is up. The
option "ro" runs a read-only reader; generic mount options (defaults,
_netdev, nofail, noauto, user, rw, ...) are accepted and ignored. At boot the
password must come from [encryption] password_file. The mount's source is
the config file's path. "-o remount" succeeds when it asks for what the
mount already is, and fails with the reason when it asks for a change.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return mounthelper.Run(args)
		},
	}
}
