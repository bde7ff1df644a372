package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/keys"
)

// NewPasswordEnv carries the new password for change-password.
const NewPasswordEnv = "EBBFS_NEW_PASSWORD"

func newChangePasswordCmd(g *globalFlags) *cobra.Command {
	var newFile string
	cmd := &cobra.Command{
		Use:   "change-password",
		Short: "Re-wrap the filesystem key under a new password",
		Long: `Re-wrap the filesystem's master key under a new password. The current
password comes from the configuration (password_file or EBBFS_PASSWORD); the
new one from --new-password-file or the EBBFS_NEW_PASSWORD environment
variable. Data is not rewritten. Update the configured password source
afterwards: the next run needs the new password.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, oldPW, oldSrc, err := g.loadWithPassword()
			if err != nil {
				return err
			}
			var newPW, newSrc string
			if newFile != "" {
				newSrc = "new password file " + newFile
				newPW, err = config.ReadPasswordFile(newFile)
			} else {
				newPW, newSrc, err = config.PasswordFromEnv(NewPasswordEnv)
				if err != nil {
					err = fmt.Errorf("no new password: give --new-password-file or set %s", NewPasswordEnv)
				}
			}
			if err != nil {
				return err
			}
			if len(newPW) < keys.MinPasswordLen {
				return fmt.Errorf("the password from %s is too short: at least %d characters are required", newSrc, keys.MinPasswordLen)
			}
			ctx := context.Background()
			st, err := openStore(ctx, c)
			if err != nil {
				return err
			}
			if err := fs.ChangePassword(ctx, st, oldPW, newPW); err != nil {
				if errors.Is(err, keys.ErrWrongPassword) {
					return &exitError{exitWrongPass, fmt.Errorf("wrong password: the current password from %s does not unlock the filesystem in %s", oldSrc, c.Storage.URL)}
				}
				return fmt.Errorf("change-password: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "password changed for %s; update %s before the next run\n", c.Storage.URL, oldSrc)
			return nil
		},
	}
	cmd.Flags().StringVar(&newFile, "new-password-file", "", "file holding the new password (default: $"+NewPasswordEnv+")")
	return cmd
}
