// Package daemon runs an ebbfs filesystem as a process: it opens the
// engine, wires reclamation, the FUSE mount, the NBD exports and the admin
// endpoint together, and takes them down in order at shutdown.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/fs/fuse"
	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/nbd"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

// closeTimeout bounds the final barrier at shutdown.
const closeTimeout = 10 * time.Minute

// Options are what Run needs.
type Options struct {
	Config   *config.Config // validated for run, mount path absolute
	ReadOnly bool           // a replica (or, with Checkpoint, a checkpoint reader)
	TakeOver bool           // take the writer lease at once
	// Standby runs a replica that takes over when the writer goes silent
	// (standby.go); ReadOnly is set with it.
	Standby    bool
	Checkpoint string // serve this checkpoint read-only
	Version    string // shown by status, /metrics and the monitor
	Log        *slog.Logger
	// Unlock opens the store and unwraps the keys.
	Unlock func(context.Context, *config.Config) (objstore.Store, *keys.Keys, error)
	// Signals stop the daemon: the first one unmounts (Run returns once
	// the mount is gone), a second one makes Run return at once.
	Signals <-chan os.Signal
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

// startupWatch stops the startup on a signal that arrives before the
// mount is up, so that an early SIGTERM still goes through the orderly
// path.
type startupWatch struct {
	w       *worker.Worker
	stopped chan struct{} // closed once a signal asked to stop
}

func watchStartup(sigs <-chan os.Signal, cancel context.CancelFunc, log *slog.Logger) *startupWatch {
	s := &startupWatch{stopped: make(chan struct{})}
	s.w = worker.Start("startup-signals", nil, func(w *worker.Worker) {
		select {
		case sig := <-sigs:
			log.Info("signal during startup; stopping", "signal", sig.String())
			close(s.stopped)
			cancel()
		case <-w.Context().Done():
		}
	})
	return s
}

// stopRequested reports whether a signal arrived during the startup.
func (s *startupWatch) stopRequested() bool {
	select {
	case <-s.stopped:
		return true
	default:
		return false
	}
}

// end hands the signals over to the caller; it may be called twice.
func (s *startupWatch) end() { s.w.Close() }

// Run runs the filesystem until a signal or an unmount stops it, then runs
// the final durability barrier. Everything it starts has returned when it
// returns, except after a second signal, which leaves the mount (and
// go-fuse's goroutines serving it) to the process's exit.
func Run(o Options) (retErr error) {
	log := o.Log
	warnTestOnlyEnv(log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startup := watchStartup(o.Signals, cancel, log)
	defer startup.end()

	p, err := open(ctx, o)
	if err != nil {
		if startup.stopRequested() && errors.Is(err, context.Canceled) {
			log.Info("stopped during startup; nothing was opened")
			return nil
		}
		return err
	}
	defer func() {
		p.cleanup.run()
		if err := p.closeEngine(log); err != nil && retErr == nil {
			retErr = err
		}
		p.stopMirror(log)
		// After the engine's Close: a local store's sweeper of open files.
		_ = objstore.Close(p.st)
	}()
	if err := p.serve(ctx, o); err != nil {
		return err
	}
	if startup.stopRequested() {
		return nil // stopped by a signal during startup
	}
	srv, err := fuse.Mount(p.e, p.mp, fuse.MountOptions{
		AllowOther:         *p.c.Mount.AllowOther,
		DefaultPermissions: *p.c.Mount.DefaultPermissions,
		FsName:             mountSource(p.c),
		Logger:             log,
		Debug:              os.Getenv("EBBFS_FUSE_DEBUG") != "",
		Ops:                p.src.FUSEOps,
	})
	if err != nil {
		return fmt.Errorf("mounting %s: %w", p.mp, err)
	}
	startup.end() // wait below owns the signals from here on
	m := &mounted{srv: srv, mp: p.mp, done: make(chan struct{}), log: log}
	m.g.Go(func() {
		srv.Wait()
		close(m.done)
	})
	if err := p.startBackground(o); err != nil {
		if uerr := srv.Unmount(); uerr != nil {
			// The waiter is left to the process's exit, like the mount.
			_ = syscall.Unmount(p.mp, syscall.MNT_DETACH)
			return err
		}
		m.g.Wait()
		return err
	}
	if startup.stopRequested() {
		m.unmount()
	}
	return p.wait(m, o)
}

// open prepares the mountpoint, unlocks the store and opens the engine.
func open(ctx context.Context, o Options) (_ *process, retErr error) {
	c, log := o.Config, o.Log
	mp, err := prepareMountpoint(c.Mount.Path, log)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Cache.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	rawStore, k, err := o.Unlock(ctx, c)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = objstore.Close(rawStore)
		}
	}()
	// Every request of this process is counted for /metrics.
	limitMemory(int64(c.Cache.MemorySize), log)
	timed := objstore.NewTimed(rawStore)
	traced := objstore.NewTraced(timed) // ebbfs trace (trace.go)
	counting := objstore.NewCounting(traced)
	var st objstore.Store = counting
	var pin uint64
	if o.Checkpoint != "" {
		rec, err := checkpoint.Get(ctx, st, o.Checkpoint)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %q: %w", o.Checkpoint, err)
		}
		if checkpoint.Expired(rec, time.Now()) {
			return nil, fmt.Errorf("checkpoint %q expired at %s; its segments may already be reclaimed", o.Checkpoint, rec.ExpireTime.Format(time.RFC3339))
		}
		pin = rec.ManifestSeq
		log.Info("serving a checkpoint", "name", rec.Name, "kind", rec.Kind, "manifest", pin)
	}
	fsStats, cleanerStats := fs.NewStats(), reclaim.NewCleanerStats()
	triggers := &reclaim.Triggers{}
	e, err := fs.Open(ctx, engineOptions(o, st, k, pin, fsStats, triggers))
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, fmt.Errorf("opening the filesystem in %s: %w", c.Storage.URL, err)
	}
	p := &process{c: c, e: e, k: k, st: st, mp: mp, version: o.Version, started: time.Now(), triggers: triggers, traced: traced}
	p.src = &telemetry.Source{Engine: e, Store: st, Count: counting, Timed: timed, FS: fsStats, Cleaner: cleanerStats,
		FUSEOps: stats.NewOps(fuse.FUSEOps...), NBDOps: stats.NewOps(nbdOps...),
		Checkpoint: o.Checkpoint, Version: o.Version, StoreURL: c.Storage.URL, Mountpoint: mp,
		StartedAt: p.started, NBDAddrs: p.nbdAddrs, Reclaim: p.reclamation}
	if o.ReadOnly && o.Checkpoint == "" {
		p.src.Lag = telemetry.NewReplicaLag(e, time.Now())
	}
	if o.Checkpoint == "" {
		p.src.HA = p.haStatus
	}
	p.sampler = telemetry.NewSampler(p.src)
	p.cleanup.push(p.sampler.Close)
	p.history = telemetry.NewHistory(cleanerStats, nil)
	return p, nil
}

// engineOptions are the engine's options for this run.
func engineOptions(o Options, st objstore.Store, k *keys.Keys, pin uint64, fsStats *fs.Stats, triggers *reclaim.Triggers) fs.Options {
	c, log := o.Config, o.Log
	var events fs.Events
	if !o.ReadOnly || o.Standby {
		events = triggers // a standby's, once it is promoted
	}
	host, _ := os.Hostname()
	fo := fs.Options{
		Store:            st,
		Keys:             k,
		CacheDir:         c.Cache.Dir,
		MemoryCacheBytes: int64(c.Cache.MemorySize),
		DiskCacheBytes:   int64(c.Cache.DiskSize),
		FlushInterval:    c.Metadata.FlushInterval.D(),
		MaxSize:          int64(c.Filesystem.MaxSize),
		ReadOnly:         o.ReadOnly,
		TakeOver:         o.TakeOver,
		Standby:          o.Standby,
		StandbyID:        standbyID(o),
		PinManifest:      pin,
		Holder:           fmt.Sprintf("ebbfs run pid %d on %s", os.Getpid(), host),
		Logger:           log,
		Clock:            clock.Real{},
		Events:           events,
		Stats:            fsStats,
		JournalRetention: testJournalRetention(log),
		ManifestInterval: testManifestInterval(log),
		DeferBackground:  true,
	}
	return fo
}

// closeEngine runs the final barrier and closes the engine.
func (p *process) closeEngine(log *slog.Logger) error {
	cctx, ccancel := context.WithTimeout(context.Background(), closeTimeout)
	defer ccancel()
	start := time.Now()
	if err := p.e.Close(cctx); err != nil {
		log.Error("final barrier failed; data written since the last barrier may not be durable", "err", err)
		return fmt.Errorf("final barrier: %w", err)
	}
	log.Info("final barrier done; filesystem closed", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// serve starts what answers before the mount: the writer's /.nbd or the
// reader's checkpoint, the admin endpoint and the NBD exports.
func (p *process) serve(ctx context.Context, o Options) error {
	c, log := p.c, o.Log
	if !o.ReadOnly {
		if err := nbd.EnsureExportDir(ctx, p.e); err != nil {
			log.Warn("could not create /.nbd", "err", err)
		}
	} else {
		p.stopReader = sync.OnceFunc(startReaderCheckpoint(ctx, c, o.Checkpoint, p.e, p.st, log))
		p.cleanup.push(p.stopReader)
	}
	adm := admin.New(p, admin.Options{TCP: c.AdminListen(), Unix: c.Admin.UnixSocket, Logger: log})
	p.routes(adm)
	p.restoreRoute(adm)
	p.traceRoute(adm)
	if err := adm.Registry().Register(telemetry.NewCollector(p.src, p.sampler)); err != nil {
		log.Warn("metrics: collector not registered", "err", err)
	}
	p.registerMirror(adm, log)
	if a := c.AdminListen(); a != "" && !config.IsLoopback(a) {
		log.Warn("admin endpoint listens beyond loopback; anyone who can reach it can flush and read status", "listen", a)
	}
	if err := adm.Start(); err != nil {
		return err
	}
	p.cleanup.push(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		adm.Close(sctx)
	})
	nbdAddrs, stopNBD, err := startNBD(c, p.e, o.ReadOnly && !o.Standby, log, p.src.NBDOps)
	if err != nil {
		return err
	}
	p.cleanup.push(stopNBD)
	if a := adm.TCPAddr(); a != "" {
		p.adminURL = "http://" + a + "/"
	}
	p.mu.Lock()
	p.mu.nbdAddrs = nbdAddrs
	p.mu.adminAddr = adm.Addrs()
	p.mu.Unlock()
	return nil
}

// startBackground starts what runs once the mount is up: the engine's
// background work, the history, a replica's following, the writer's
// reclamation. Reclamation starts only then: go-fuse's mount check
// briefly holds a file open on the mount itself, and a process that exits
// (a crash, a failpoint) while holding one deadlocks in the kernel's FLUSH
// to itself.
func (p *process) startBackground(o Options) error {
	log := o.Log
	p.e.StartBackground()
	p.history.Start()
	p.cleanup.push(p.history.Close)
	follow := func() func() {
		// A replica follows the writer from the bucket alone.
		w := worker.Start("follow-writer", nil, func(w *worker.Worker) {
			followWriter(w.Context(), p.e, p.c.Replica.PollInterval.D(), log)
		})
		return w.Close
	}
	if !o.ReadOnly {
		bg, err := startBackground(p.c, p.e, p.st, p.k, p.triggers, p.src.Cleaner, log)
		if err != nil {
			return err
		}
		p.bg.Store(bg)
		if err := p.startMirror(log); err != nil {
			// The filesystem runs without its mirror rather than not at
			// all; status and the log say so.
			log.Error("mirror: not started; the writer runs without it (restart the writer, or run ebbfs mirror run, once the mirror store answers)", "err", err)
		}
	}
	switch {
	case o.Standby || !o.ReadOnly:
		// A standby, or a writer that hands over when one asks (and,
		// started with --standby or with [ha] rejoin, rejoins as a
		// standby once fenced).
		sb := startStandby(p, follow, o.Standby || p.c.HA.Rejoin, log)
		p.standby.Store(sb)
		p.cleanup.push(func() { sb.close(); p.bg.Swap(nil).close(log) })
	case o.Checkpoint == "":
		p.cleanup.push(follow())
	}
	return nil
}

// wait runs until the mount goes away or signals stop the process.
func (p *process) wait(m *mounted, o Options) error {
	log := o.Log
	log.Info("ebbfs running", "mountpoint", p.mp, "store", p.c.Storage.URL, "read_only", o.ReadOnly, "role", p.e.Role(),
		"nbd", p.nbdAddrs(), "admin", p.adminURL, "admin_socket", p.c.Admin.UnixSocket, "pid", os.Getpid())
	signals := 0
	for {
		select {
		case <-m.done:
			m.g.Wait() // the unmount that ended it, if any, has returned
			log.Info("unmounted; stopping", "mountpoint", p.mp)
			return nil
		case s := <-o.Signals:
			signals++
			if signals > 1 {
				// The mount stays until the process exits: the goroutines
				// waiting for it (m.g, go-fuse's) are left to that exit.
				log.Warn("second signal: stopping without waiting for the mount to go away", "signal", s.String())
				return nil
			}
			log.Info("stopping", "signal", s.String())
			m.unmount()
		}
	}
}

// mounted is the FUSE mount and the goroutines waiting on it.
type mounted struct {
	srv  interface{ Unmount() error }
	mp   string
	done chan struct{} // closed once the mount is gone
	g    worker.Group  // the waiter and the unmount
	log  *slog.Logger
}

// unmount starts an unmount: go-fuse's Unmount waits for the requests in
// flight, which a store that does not answer may hold up, so it runs in a
// goroutine m owns and a second signal can still stop the process.
func (m *mounted) unmount() {
	m.g.Go(func() { unmount(m.srv, m.mp, m.done, m.log) })
}
