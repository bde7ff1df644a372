package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"ebbfs.dev/ebbfs/internal/gnutls"
)

// optStartTLS handles NBD_OPT_STARTTLS: an ACK in plain text, then a TLS
// handshake on the same connection; every later byte is inside TLS.
// Everything negotiated before (structured replies, meta contexts) is
// forgotten, as the protocol requires.
func (c *conn) optStartTLS(data []byte) error {
	switch {
	case c.tlsStart == nil:
		return c.optReply(optStartTLS, repErrUnsup, []byte("TLS is not configured on this listener"))
	case c.tls:
		return c.optReply(optStartTLS, repErrInvalid, []byte("TLS already started"))
	case len(data) != 0:
		return c.optReply(optStartTLS, repErrInvalid, []byte("NBD_OPT_STARTTLS takes no data"))
	}
	if err := c.optReply(optStartTLS, repAck, nil); err != nil {
		return err
	}
	if c.br.Buffered() > 0 {
		// Plain-text bytes sent after STARTTLS before the handshake
		// would otherwise be taken as if they came over TLS.
		return errors.New("NBD_OPT_STARTTLS: client sent data before the TLS handshake")
	}
	tc, err := c.tlsStart(c.ctx, c.raw, c.log)
	if err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	c.nc, c.br = tc, bufio.NewReaderSize(tc, handshakeBuffer)
	c.tls = true
	c.structured, c.metaAlloc, c.metaExport = false, false, ""
	return nil
}

// tlsStart runs the server side of a TLS handshake on raw after
// NBD_OPT_STARTTLS and returns the connection inside TLS.
type tlsStart func(ctx context.Context, raw net.Conn, log *slog.Logger) (net.Conn, error)

// x509Start is crypto/tls with certificates.
func x509Start(cfg *tls.Config) tlsStart {
	return func(ctx context.Context, raw net.Conn, _ *slog.Logger) (net.Conn, error) {
		tc := tls.Server(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		return tc, nil
	}
}

// pskStart is GnuTLS with pre-shared keys; the identity the client used
// goes to the log.
func pskStart(p *gnutls.PSKServer) tlsStart {
	return func(ctx context.Context, raw net.Conn, log *slog.Logger) (net.Conn, error) {
		tc, err := p.Handshake(ctx, raw)
		if err != nil {
			return nil, err
		}
		log.Info("nbd: TLS-PSK client", "identity", tc.Identity())
		return tc, nil
	}
}

// TLSFiles names the PEM files of a TLS listener.
type TLSFiles struct {
	// Cert and Key are the server's certificate (chain) and private key.
	Cert, Key string
	// ClientCA, when set, makes the server require a client certificate
	// signed by one of its certificates.
	ClientCA string
}

// LoadTLSConfig builds the server TLS configuration from PEM files: TLS
// 1.2 or later, Go's default cipher suites.
func LoadTLSConfig(f TLSFiles) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("nbd: TLS certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}
	if f.ClientCA != "" {
		pem, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("nbd: TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("nbd: TLS client CA %s: no PEM certificate in it", f.ClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
