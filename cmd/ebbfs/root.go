package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/config"
)

// DefaultConfigPath is used when neither -c nor EBBFS_CONFIG is given.
const DefaultConfigPath = "/etc/ebbfs/ebbfs.toml"

// ConfigEnv names the configuration file when -c is not given.
const ConfigEnv = "EBBFS_CONFIG"

type globalFlags struct {
	config   string
	logLevel string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "ebbfs",
		Short:         "ebbfs: an encrypted filesystem whose durable home is an object store",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		// ebbfs completion bash|zsh|fish|powershell prints a completion
		// script (make install installs them).
		CompletionOptions: cobra.CompletionOptions{},
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{fmt.Errorf("%w\nrun '%s --help' for usage", err, c.CommandPath())}
	})
	root.PersistentFlags().StringVarP(&g.config, "config", "c", "", "configuration file (default: $"+ConfigEnv+", else "+DefaultConfigPath+")")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", envOr("EBBFS_LOG_LEVEL", "info"), "log level: debug, info, warn, error")
	root.AddCommand(
		newInitCmd(g),
		newRunCmd(g),
		newFlushCmd(g),
		newPromoteCmd(g),
		newStatusCmd(g),
		newVersionCmd(),
		newChangePasswordCmd(g),
		newUpgradeCmd(g),
		newFsckCmd(g),
		newMountHelperCmd(),
		newCheckpointCmd(g),
		newReclaimCmd(g),
		newSpaceCmd(g),
		newMonitorCmd(g),
		newTraceCmd(g),
		newConfigCmd(g),
		newMirrorCmd(g),
	)
	return root
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// configPath returns the configuration file to read and where its name
// came from: -c, then EBBFS_CONFIG, then /etc/ebbfs/ebbfs.toml.
func (g *globalFlags) configPath() (path, from string) {
	if g.config != "" {
		return g.config, "-c"
	}
	if p := os.Getenv(ConfigEnv); p != "" {
		return p, ConfigEnv
	}
	return DefaultConfigPath, ""
}

func (g *globalFlags) load() (*config.Config, error) {
	p, from := g.configPath()
	c, err := config.Load(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			switch from {
			case "":
				return nil, fmt.Errorf("%w (give the configuration file with -c, or export %s=/path/to/ebbfs.toml)", err, ConfigEnv)
			case ConfigEnv:
				return nil, fmt.Errorf("%w (the file named by %s)", err, ConfigEnv)
			}
		}
		return nil, err
	}
	return c, nil
}

// loadWithPassword loads the configuration, sets up logging and reads the
// filesystem password and where it came from: the first steps of the
// commands that unlock the filesystem without running it.
func (g *globalFlags) loadWithPassword() (c *config.Config, pw, src string, err error) {
	if c, err = g.load(); err != nil {
		return nil, "", "", err
	}
	if _, err = g.logger(); err != nil {
		return nil, "", "", err
	}
	if pw, src, err = c.Password(); err != nil {
		return nil, "", "", err
	}
	return c, pw, src, nil
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.TrimSpace(g.logLevel))); err != nil {
		return nil, &usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)}
	}
	l := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	slog.SetDefault(l)
	return l, nil
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &usageError{fmt.Errorf("%s takes no arguments (got %q)", cmd.CommandPath(), args)}
	}
	return nil
}
