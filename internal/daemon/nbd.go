package daemon

import (
	"fmt"
	"log/slog"
	"net"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/nbd"
)

// startNBD listens on the configured addresses and serves the exports. It
// returns the addresses (as nbd:// URIs) and a stop function.
func startNBD(c *config.Config, e *fs.Engine, readOnly bool, log *slog.Logger, ops *stats.Ops) ([]string, func(), error) {
	var ls []net.Listener
	var addrs []string
	fail := func(err error) ([]string, func(), error) {
		for _, l := range ls {
			l.Close()
		}
		return nil, nil, err
	}
	for _, a := range c.NBD.Listen {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fail(fmt.Errorf("nbd: listen %s: %w", a, err))
		}
		ls = append(ls, l)
		addrs = append(addrs, "nbd://"+l.Addr().String()+"/")
	}
	if p := c.NBDUnixSocket(); p != "" {
		l, err := listenUnixSocket(p, 0o600)
		if err != nil {
			return fail(fmt.Errorf("nbd: listen %s: %w", p, err))
		}
		ls = append(ls, l)
		addrs = append(addrs, "nbd+unix:///?socket="+p)
	}
	if len(ls) == 0 {
		return nil, func() {}, nil
	}
	srv := nbd.NewServer(timedBackend{Backend: nbd.NewEngineBackend(e), ops: ops}, nbd.Options{Logger: log, ReadOnly: readOnly})
	var serving worker.Group // one Serve per listener, waited for by stop
	for _, l := range ls {
		serving.Go(func() {
			if err := srv.Serve(l); err != nil {
				log.Error("nbd: serve", "addr", l.Addr().String(), "err", err)
			}
		})
	}
	stop := func() {
		if err := srv.Close(); err != nil {
			log.Warn("nbd: close", "err", err)
		}
		serving.Wait()
		if p := c.NBDUnixSocket(); p != "" {
			_ = removeIfSocket(p)
		}
	}
	return addrs, stop, nil
}
