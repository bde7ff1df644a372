package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newConfigCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Check the configuration and print it with every default filled in",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "# %s: valid; effective configuration:\n", c.Path)
			return c.Encode(cmd.OutOrStdout())
		},
	}
}
