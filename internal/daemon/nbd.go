package daemon

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/gnutls"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/nbd"
)

// startNBD listens on the configured addresses and serves the exports. It
// returns the addresses (as nbd:// URIs, nbds:// for TLS) and a stop
// function. With nbd.tls_cert or nbd.tls_psk_file set every TCP listener
// requires TLS; the unix socket (mode 0600) stays plain.
func startNBD(c *config.Config, e *fs.Engine, readOnly bool, log *slog.Logger, ops *stats.Ops) ([]string, func(), error) {
	var ls []net.Listener
	var addrs []string
	var tlsConfig *tls.Config
	var psk *gnutls.PSKServer
	switch {
	case c.NBD.TLSPSKFile != "":
		p, err := gnutls.NewPSKServer(c.NBD.TLSPSKFile)
		if err != nil {
			return nil, nil, fmt.Errorf("nbd.tls_psk_file: %w", err)
		}
		psk = p
	case c.NBD.TLSCert != "":
		cfg, err := nbd.LoadTLSConfig(nbd.TLSFiles{Cert: c.NBD.TLSCert, Key: c.NBD.TLSKey, ClientCA: c.NBD.TLSClientCA})
		if err != nil {
			return nil, nil, err
		}
		tlsConfig = cfg
	}
	scheme := "nbd://"
	if c.NBD.TLS() {
		scheme = "nbds://"
	}
	tcp := map[net.Listener]bool{}
	fail := func(err error) ([]string, func(), error) {
		for _, l := range ls {
			l.Close()
		}
		if psk != nil {
			psk.Close()
		}
		return nil, nil, err
	}
	for _, a := range c.NBD.Listen {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fail(fmt.Errorf("nbd: listen %s: %w", a, err))
		}
		ls = append(ls, l)
		tcp[l] = true
		addrs = append(addrs, scheme+l.Addr().String()+"/")
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
		if psk != nil {
			psk.Close()
		}
		return nil, func() {}, nil
	}
	srv := nbd.NewServer(timedBackend{Backend: nbd.NewEngineBackend(e), ops: ops}, nbd.Options{Logger: log, ReadOnly: readOnly,
		Writable: func() bool { return !e.ReadOnly() }})
	var serving worker.Group // one Serve per listener, waited for by stop
	for _, l := range ls {
		serving.Go(func() {
			serve := srv.Serve
			switch {
			case psk != nil && tcp[l]:
				serve = func(l net.Listener) error { return srv.ServePSK(l, psk) }
			case tlsConfig != nil && tcp[l]:
				serve = func(l net.Listener) error { return srv.ServeTLS(l, tlsConfig) }
			}
			if err := serve(l); err != nil {
				log.Error("nbd: serve", "addr", l.Addr().String(), "err", err)
			}
		})
	}
	stop := func() {
		if err := srv.Close(); err != nil {
			log.Warn("nbd: close", "err", err)
		}
		serving.Wait()
		if psk != nil {
			psk.Close() // every connection has ended: Close waited for them
		}
		if p := c.NBDUnixSocket(); p != "" {
			_ = removeIfSocket(p)
		}
	}
	return addrs, stop, nil
}
