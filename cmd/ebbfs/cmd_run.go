package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/fs/fuse"
	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/nbd"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

// closeTimeout bounds the final barrier at shutdown.
const closeTimeout = 10 * time.Minute

type runFlags struct {
	readOnly   bool
	takeOver   bool
	mountpoint string
	checkpoint string
}

func newRunCmd(g *globalFlags) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the writer (or, with --read-only, a reader) in the foreground",
		Long: `Open the filesystem, mount it at [mount] path, serve NBD exports (the regular
files in /.nbd/) and the admin endpoint, and run until SIGINT, SIGTERM or
umount. Every path to exit runs a final durability barrier first. Only one
writer may run against a store at a time: a second one is refused while the
first holds the writer lease.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.load()
			if err != nil {
				return err
			}
			if f.mountpoint != "" {
				abs, err := filepath.Abs(f.mountpoint)
				if err != nil {
					return err
				}
				c.Mount.Path = abs
			}
			if err := c.ValidateForRun(); err != nil {
				return fmt.Errorf("config %s: %w", c.Path, err)
			}
			if f.takeOver && (f.readOnly || f.checkpoint != "") {
				return &usageError{errors.New("--take-over is for a writer; a replica takes no lease")}
			}
			if f.checkpoint != "" {
				if err := checkpoint.ValidName(f.checkpoint); err != nil {
					return &usageError{fmt.Errorf("--checkpoint: %w", err)}
				}
				f.readOnly = true // a checkpoint is served read-only
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			return runFS(c, f, log)
		},
	}
	cmd.Flags().BoolVar(&f.readOnly, "read-only", false, "run a read-only replica that follows the writer; writes fail with EROFS")
	cmd.Flags().BoolVar(&f.takeOver, "take-over", false, "take the writer lease at once from a writer that crashed or is cut off on another machine (it is fenced; see README)")
	cmd.Flags().StringVar(&f.mountpoint, "mountpoint", "", "mount here instead of [mount] path")
	cmd.Flags().StringVar(&f.checkpoint, "checkpoint", "", "serve the state of checkpoint NAME read-only (does not follow the writer)")
	return cmd
}

// process is the running writer or reader; it is the admin backend.
type process struct {
	c       *config.Config
	e       *fs.Engine
	k       *keys.Keys
	st      objstore.Store
	count   *objstore.Counting
	bg      atomic.Pointer[background] // set once the mount is up; never for a reader
	mp      string
	started time.Time
	log     *slog.Logger

	// What /metrics, /v1/monitor and the page show.
	checkpoint string                // the checkpoint a checkpoint reader serves
	fsStats    *fs.Stats             // tombstones written and barriers
	cleaner    *reclaim.CleanerStats // the tombstone cleaner
	timed      *objstore.Timed       // store latency by operation
	fuseOps    *stats.Ops            // FUSE requests by operation
	nbdOps     *stats.Ops            // NBD commands
	lag        *replicaLag           // readers that follow: distance from the writer
	sampler    *sampler
	history    *history

	mu struct {
		sync.Mutex
		barriers  uint64
		last      time.Time
		lastErr   string
		nbdAddrs  []string
		adminAddr []string
	}
}

var _ admin.Backend = (*process)(nil)

func (p *process) Flush(ctx context.Context) error {
	err := p.e.Barrier(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.barriers++
	p.mu.last = time.Now()
	p.mu.lastErr = ""
	if err != nil {
		p.mu.lastErr = err.Error()
	}
	return err
}

func (p *process) Status(ctx context.Context) admin.Status {
	extra := map[string]any{}
	if p.count != nil {
		n := p.count.Snapshot()
		extra[extraStoreRequests] = n.Requests()
		extra[extraBytesUp] = n.BytesUp
		extra[extraBytesDown] = n.BytesDown
	}
	if live, err := p.e.LiveBytes(); err == nil {
		extra[extraLiveBytes] = live
	}
	if bg := p.bg.Load(); bg != nil {
		_, cycles := bg.r.LastCycle()
		extra[extraReclaimCycles] = cycles
	}
	if p.lag != nil {
		extra[extraReplica] = p.lag.get(ctx)
	}
	if err := p.e.LocalFailure(); err != nil {
		extra[extraMetadataFailed] = err.Error()
	}
	if free, floor, err := p.e.CacheDirSpace(); err == nil && !p.e.ReadOnly() {
		extra[extraCacheDirFree] = free
		extra[extraCacheDirFloor] = floor
		if p.e.CacheDirReserveReleased() {
			extra[extraCacheDirReserveReleased] = true
		}
	}
	if p.timed != nil {
		if since, last := p.timed.Health(); !since.IsZero() {
			extra[extraStoreUnreachableSince] = since
			extra[extraStoreLastError] = last
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return admin.Status{
		Extra:       extra,
		Version:     versionString(),
		PID:         os.Getpid(),
		FSUUID:      uuidString(p.k.UUID),
		Store:       p.c.Storage.URL,
		Mountpoint:  p.mp,
		ReadOnly:    p.e.ReadOnly(),
		StartedAt:   p.started,
		UptimeSec:   time.Since(p.started).Seconds(),
		NBD:         append([]string(nil), p.mu.nbdAddrs...),
		Admin:       append([]string(nil), p.mu.adminAddr...),
		Barriers:    p.mu.barriers,
		LastBarrier: p.mu.last,
		LastError:   p.mu.lastErr,
	}
}

// cleanupStack runs registered functions in reverse order.
type cleanupStack []func()

func (s *cleanupStack) push(f func()) { *s = append(*s, f) }
func (s *cleanupStack) run() {
	for i := len(*s) - 1; i >= 0; i-- {
		(*s)[i]()
	}
	*s = nil
}

func runFS(c *config.Config, f *runFlags, log *slog.Logger) (retErr error) {
	warnTestOnlyEnv(log)
	// Signals are caught from the start so that an early SIGTERM still
	// goes through the orderly path below.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stopRequested atomic.Bool
	startupDone := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case s := <-sigs:
			log.Info("signal during startup; stopping", "signal", s.String())
			stopRequested.Store(true)
			cancel()
		case <-startupDone:
		}
	}()
	endStartup := func() {
		select {
		case <-startupDone:
		default:
			close(startupDone)
		}
		<-watcherDone
	}
	defer endStartup()

	mp, err := prepareMountpoint(c.Mount.Path, log)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Cache.Dir, 0o700); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	rawStore, k, err := unlock(ctx, c)
	if err != nil {
		if stopRequested.Load() && errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	// Every request of this process is counted for /metrics.
	limitMemory(int64(c.Cache.MemorySize), log)
	timed := objstore.NewTimed(rawStore)
	counting := objstore.NewCounting(timed)
	var st objstore.Store = counting
	var pin uint64
	if f.checkpoint != "" {
		rec, err := checkpoint.Get(ctx, st, f.checkpoint)
		if err != nil {
			return fmt.Errorf("checkpoint %q: %w", f.checkpoint, err)
		}
		if checkpoint.Expired(rec, time.Now()) {
			return fmt.Errorf("checkpoint %q expired at %s; its segments may already be reclaimed", f.checkpoint, rec.ExpireTime.Format(time.RFC3339))
		}
		pin = rec.ManifestSeq
		log.Info("serving a checkpoint", "name", rec.Name, "kind", rec.Kind, "manifest", pin)
	}
	host, _ := os.Hostname()
	fsStats, cleanerStats := fs.NewStats(), reclaim.NewCleanerStats()
	var events fs.Events
	triggers := &reclaim.Triggers{}
	if !f.readOnly {
		events = triggers
	}
	e, err := fs.Open(ctx, fs.Options{
		Store:            st,
		Keys:             k,
		CacheDir:         c.Cache.Dir,
		MemoryCacheBytes: int64(c.Cache.MemorySize),
		DiskCacheBytes:   int64(c.Cache.DiskSize),
		FlushInterval:    c.Metadata.FlushInterval.D(),
		MaxSize:          int64(c.Filesystem.MaxSize),
		ReadOnly:         f.readOnly,
		TakeOver:         f.takeOver,
		PinManifest:      pin,
		Holder:           fmt.Sprintf("ebbfs run pid %d on %s", os.Getpid(), host),
		Logger:           log,
		Clock:            clock.Real{},
		Events:           events,
		Stats:            fsStats,
		JournalRetention: testJournalRetention(log),
		ManifestInterval: testManifestInterval(log),
		DeferBackground:  true,
	})
	if err != nil {
		if stopRequested.Load() && errors.Is(err, context.Canceled) {
			log.Info("stopped during startup; nothing was opened")
			return nil
		}
		return fmt.Errorf("opening the filesystem in %s: %w", c.Storage.URL, err)
	}
	p := &process{c: c, e: e, k: k, st: st, count: counting, mp: mp, started: time.Now(), log: log,
		checkpoint: f.checkpoint, fsStats: fsStats, cleaner: cleanerStats, timed: timed,
		fuseOps: stats.NewOps(fuse.FUSEOps...), nbdOps: stats.NewOps(nbdOps...)}
	p.sampler = &sampler{p: p}
	p.history = newHistory(cleanerStats)
	if f.readOnly && f.checkpoint == "" {
		p.lag = &replicaLag{e: e, started: time.Now()}
	}

	var cleanup cleanupStack
	closeEngine := func() error {
		cctx, ccancel := context.WithTimeout(context.Background(), closeTimeout)
		defer ccancel()
		start := time.Now()
		if err := e.Close(cctx); err != nil {
			log.Error("final barrier failed; data written since the last barrier may not be durable", "err", err)
			return fmt.Errorf("final barrier: %w", err)
		}
		log.Info("final barrier done; filesystem closed", "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
	defer func() {
		cleanup.run()
		if err := closeEngine(); err != nil && retErr == nil {
			retErr = err
		}
	}()

	if !f.readOnly {
		if err := nbd.EnsureExportDir(ctx, e); err != nil {
			log.Warn("could not create /.nbd", "err", err)
		}
	} else {
		cleanup.push(startReaderCheckpoint(ctx, c, e, st, log))
	}

	adm := admin.New(p, admin.Options{TCP: c.AdminListen(), Unix: c.Admin.UnixSocket, Logger: log})
	p.routes(adm)
	if err := adm.Registry().Register(newCollector(p)); err != nil {
		log.Warn("metrics: collector not registered", "err", err)
	}
	if a := c.AdminListen(); a != "" && !config.IsLoopback(a) {
		log.Warn("admin endpoint listens beyond loopback; anyone who can reach it can flush and read status", "listen", a)
	}
	if err := adm.Start(); err != nil {
		return err
	}
	cleanup.push(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		adm.Close(sctx)
	})

	nbdAddrs, stopNBD, err := startNBD(c, e, f.readOnly, log, p.nbdOps)
	if err != nil {
		return err
	}
	cleanup.push(stopNBD)

	p.mu.Lock()
	p.mu.nbdAddrs = nbdAddrs
	p.mu.adminAddr = adm.Addrs()
	p.mu.Unlock()

	if stopRequested.Load() {
		return nil // stopped by a signal during startup
	}
	srv, err := fuse.Mount(e, mp, fuse.MountOptions{
		AllowOther:         *c.Mount.AllowOther,
		DefaultPermissions: *c.Mount.DefaultPermissions,
		FsName:             mountSource(c),
		Logger:             log,
		Debug:              os.Getenv("EBBFS_FUSE_DEBUG") != "",
		Ops:                p.fuseOps,
	})
	if err != nil {
		return fmt.Errorf("mounting %s: %w", mp, err)
	}
	endStartup() // the loop below owns the signals from here on
	// Reclamation starts only once the mount is up: go-fuse's mount check
	// briefly holds a file open on the mount itself, and a process that
	// exits (a crash, a failpoint) while holding one deadlocks in the
	// kernel's FLUSH to itself.
	e.StartBackground()
	p.history.start()
	cleanup.push(p.history.close)
	if f.readOnly && f.checkpoint == "" {
		// A replica follows the writer from the bucket alone.
		fctx, fcancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			followWriter(fctx, e, c.Replica.PollInterval.D(), log)
		}()
		cleanup.push(func() { fcancel(); <-done })
	}
	if !f.readOnly {
		bg, err := startBackground(c, e, st, k, triggers, cleanerStats, log)
		if err != nil {
			if uerr := srv.Unmount(); uerr != nil {
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			}
			return err
		}
		p.bg.Store(bg)
		cleanup.push(func() { bg.close(log) })
	}
	fuseDone := make(chan struct{})
	go func() {
		srv.Wait()
		close(fuseDone)
	}()
	if stopRequested.Load() {
		go unmount(srv, mp, fuseDone, log)
	}

	adminURL := ""
	if a := adm.TCPAddr(); a != "" {
		adminURL = "http://" + a + "/"
	}
	log.Info("ebbfs running", "mountpoint", mp, "store", c.Storage.URL, "read_only", f.readOnly,
		"nbd", nbdAddrs, "admin", adminURL, "admin_socket", c.Admin.UnixSocket, "pid", os.Getpid())

	signals := 0
	for {
		select {
		case <-fuseDone:
			log.Info("unmounted; stopping", "mountpoint", mp)
			return nil
		case s := <-sigs:
			signals++
			if signals > 1 {
				log.Warn("second signal: stopping without waiting for the mount to go away", "signal", s.String())
				return nil
			}
			log.Info("stopping", "signal", s.String())
			go unmount(srv, mp, fuseDone, log)
		}
	}
}

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
	mp, err := canonicalMountpoint(p)
	if err != nil {
		return "", err
	}
	m, mounted, err := findMount(mp)
	if err != nil {
		return "", fmt.Errorf("reading the mount table: %w", err)
	}
	if mounted {
		if m.FSType == "fuse."+fuse.Name && deadFUSEMount(mp) {
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

// deadFUSEMount reports whether the FUSE mount at mp has no daemon behind
// it (ENOTCONN). statfs always reaches the daemon, unlike stat, which the
// kernel may answer from its attribute cache for a while after the daemon
// died. A daemon that does not answer within a few seconds counts as alive.
func deadFUSEMount(mp string) bool {
	res := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		res <- syscall.Statfs(mp, &st)
	}()
	select {
	case err := <-res:
		return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED)
	case <-time.After(3 * time.Second):
		return false
	}
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
// cache. At 384 MiB the writer's peak RSS reached 793-808 MiB with a
// 256 MiB cache in mountbench (random overwrites, then 1 GiB written);
// at 320 MiB its writes ran as fast and it peaked 66 MiB lower. The
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
