package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/daemon"
	"ebbfs.dev/ebbfs/internal/keys"
)

func versionString() string {
	v := version
	if v == "dev" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					v = "dev-" + s.Value[:12]
				}
			}
		}
	}
	return v
}

// versionInfo is `version --json`.
type versionInfo struct {
	Version     string `json:"version"`
	StoreFormat int    `json:"store_format"`
	Go          string `json:"go"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	TestTags    string `json:"test_tags,omitempty"`
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return printJSON(cmd.OutOrStdout(), versionInfo{versionString(), keys.FormatVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH, daemon.TestTags})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ebbfs %s (store format %d, %s, %s/%s)\n", versionString(), keys.FormatVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if daemon.TestTags != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "TEST BUILD, tags: %s (failpoints and the test time scale; not for production)\n", daemon.TestTags)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
