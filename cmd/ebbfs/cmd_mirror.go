package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/daemon"
	"ebbfs.dev/ebbfs/mirror"
	"ebbfs.dev/ebbfs/objstore"
)

func newMirrorCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mirror",
		Short: "Keep a continuous, encrypted copy of the store in a second store",
		Long: `A mirror copies every object the writer makes durable to a second store
(another bucket, provider or a local directory), as it is: the copy is as
encrypted as the original. The writer runs one when its configuration has
[mirror] to = URL; 'ebbfs mirror run' runs one as a process of its own. The
mirror is an ebbfs store: 'ebbfs run --read-only' serves it (README.md,
"Mirror").`,
	}
	cmd.AddCommand(newMirrorRunCmd(g))
	return cmd
}

type mirrorFlags struct {
	to, endpoint, region, profile, listen string
	bandwidth                             string
	retention                             time.Duration
}

func newMirrorRunCmd(g *globalFlags) *cobra.Command {
	var f mirrorFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Mirror the filesystem's store into a second store until stopped",
		Long: `Run a mirror as a process of its own, beside the writer or on another
machine with the same [storage] and password. It follows the writer's
journals (one GET a poll interval while idle, no LIST), copies what they
name, and keeps its position in the mirror store (mirror/state), so that
after a restart it goes on where it was. The flags override [mirror] in
the configuration. With --listen it serves /metrics (Prometheus) and
/v1/mirror (its status as JSON) on that loopback address.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			if err := f.apply(c); err != nil {
				return err
			}
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			return runMirror(c, f.listen, log, sigs)
		},
	}
	cmd.Flags().StringVar(&f.to, "to", "", "the mirror store's URL (file:///path or s3://bucket/prefix); default [mirror] to")
	cmd.Flags().StringVar(&f.endpoint, "endpoint", "", "the mirror store's S3 endpoint; default [mirror] endpoint")
	cmd.Flags().StringVar(&f.region, "region", "", "the mirror store's S3 region; default [mirror] region")
	cmd.Flags().StringVar(&f.profile, "profile", "", "the shared AWS profile whose credentials reach the mirror store; default [mirror] profile")
	cmd.Flags().StringVar(&f.bandwidth, "bandwidth", "", "copy at most this many bytes per second (e.g. 50MiB); default [mirror] bandwidth")
	cmd.Flags().DurationVar(&f.retention, "retention", 0, "delay before a deletion reaches the mirror; default [mirror] retention (7 days)")
	cmd.Flags().StringVar(&f.listen, "listen", "", "serve /metrics and /v1/mirror on this loopback host:port")
	return cmd
}

func (f *mirrorFlags) apply(c *config.Config) error {
	m := &c.Mirror
	for _, p := range []struct {
		dst *string
		v   string
	}{{&m.To, f.to}, {&m.Endpoint, f.endpoint}, {&m.Region, f.region}, {&m.Profile, f.profile}} {
		if p.v != "" {
			*p.dst = p.v
		}
	}
	if f.bandwidth != "" {
		b, err := config.ParseSize(f.bandwidth)
		if err != nil {
			return &usageError{fmt.Errorf("--bandwidth: %w", err)}
		}
		m.Bandwidth = b
	}
	if f.retention != 0 {
		m.Retention = config.Duration(f.retention)
	}
	if m.To == "" {
		return &usageError{errors.New("no mirror store: give --to URL or set [mirror] to")}
	}
	if err := c.Validate(); err != nil {
		return &usageError{err}
	}
	if f.listen != "" && !config.IsLoopback(f.listen) {
		return &usageError{fmt.Errorf("--listen %q: give a loopback address (127.0.0.1:PORT)", f.listen)}
	}
	return nil
}

// openMirrorStore opens [mirror]'s store.
func openMirrorStore(ctx context.Context, c *config.Config) (objstore.Store, error) {
	m := c.Mirror
	return openStoreAt(ctx, c, m.To, m.Endpoint, m.Region, m.Profile, "mirror store")
}

func runMirror(c *config.Config, listen string, log *slog.Logger, sigs <-chan os.Signal) error {
	ctx := context.Background()
	src, k, err := unlock(ctx, c)
	if err != nil {
		return err
	}
	defer objstore.Close(src)
	dst, err := openMirrorStore(ctx, c)
	if err != nil {
		return err
	}
	defer objstore.Close(dst)
	srcCount, dstCount := objstore.NewCounting(src), objstore.NewCounting(dst)
	m, err := mirror.Open(ctx, mirror.Options{Source: srcCount, Dest: dstCount, Keys: k,
		Retention: c.Mirror.Retention.D(), Bandwidth: int64(c.Mirror.Bandwidth),
		PollInterval: c.Mirror.PollInterval.D(), Log: log,
		HoldName: mirror.HoldName(hostname(), c.Mirror.To), HoldTTL: daemon.MirrorHoldTTL(log)})
	if err != nil {
		return err
	}
	if listen != "" {
		stop, err := serveMirror(listen, m, srcCount, dstCount)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("mirror: running", "from", c.Storage.URL, "to", c.Mirror.To, "retention", c.Mirror.Retention.D(), "bandwidth", int64(c.Mirror.Bandwidth))
	if err := m.Start(ctx); err != nil {
		return err
	}
	select {
	case <-sigs:
	case <-m.Done():
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = m.Close(cctx)
	st := m.Status()
	log.Info("mirror: stopped", "journal", st.Journal, "copied_objects", st.CopiedObjects, "copied_bytes", st.CopiedBytes,
		"source_requests", srcCount.Snapshot().Requests(), "mirror_requests", dstCount.Snapshot().Requests())
	return err
}

// MirrorReply is GET /v1/mirror of `ebbfs mirror run --listen`
// (docs/JSON.md): the mirror's status and the requests it sent to each
// store.
type MirrorReply struct {
	mirror.Status
	SourceRequests map[string]int64 `json:"source_requests"`
	MirrorRequests map[string]int64 `json:"mirror_requests"`
}

func serveMirror(listen string, m *mirror.Mirror, src, dst *objstore.Counting) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(mirror.NewCollector(func() *mirror.Mirror { return m }))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/mirror", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(MirrorReply{Status: m.Status(), SourceRequests: src.Snapshot().Map(), MirrorRequests: dst.Snapshot().Map()})
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { // owned: stop closes the server and waits for it
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return func() { _ = srv.Close(); <-done }, nil
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
