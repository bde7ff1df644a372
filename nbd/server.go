package nbd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/internal/gnutls"
	"ebbfs.dev/ebbfs/internal/worker"
)

// Options configure a Server. The zero value is valid.
type Options struct {
	// Logger receives connection and error logs. Default: slog.Default().
	Logger *slog.Logger
	// MaxRequest is the largest READ/WRITE payload accepted and the
	// maximum block size advertised. Default 32 MiB; values are clamped
	// to [4 KiB, 1 GiB].
	MaxRequest int
	// ReadOnly exports every export read-only.
	ReadOnly bool
	// Writable, if set, is asked at each connection's handshake: false
	// exports read-only to that connection (a standby until its
	// promotion).
	Writable func() bool
}

// EnsureDefaults fills in defaults and clamps out-of-range values.
func (o *Options) EnsureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.MaxRequest <= 0:
		o.MaxRequest = defaultMaxRequest
	case o.MaxRequest < preferredBlockSize:
		o.MaxRequest = preferredBlockSize
	case o.MaxRequest > 1<<30:
		o.MaxRequest = 1 << 30
	}
}

const (
	// handshakeBuffer and transmitBuffer size a connection's read buffer
	// during the handshake (small: a thousand idle connections cost
	// little) and in the transmission phase.
	handshakeBuffer = 4 << 10
	transmitBuffer  = 64 << 10
	// handshakeTimeout bounds the whole option negotiation.
	handshakeTimeout = 30 * time.Second
	// lingerTimeout and lingerBytes bound what a refused connection's
	// close waits for and discards (lingerClose).
	lingerTimeout = 2 * time.Second
	lingerBytes   = 1 << 20
	// writeTimeout bounds writing one reply to a client that does not read.
	writeTimeout = 60 * time.Second
)

// Server serves a Backend over the NBD protocol (fixed newstyle
// negotiation, simple or structured replies, optionally TLS).
type Server struct {
	b   Backend
	o   Options
	log *slog.Logger

	mu struct {
		sync.Mutex
		closed    bool
		listeners map[net.Listener]struct{}
		conns     map[*conn]struct{}
	}
	conns worker.Group // one goroutine per connection
}

// NewServer returns a server for b. It does not listen until Serve.
func NewServer(b Backend, o Options) *Server {
	o.EnsureDefaults()
	s := &Server{b: b, o: o, log: o.Logger}
	s.mu.listeners = make(map[net.Listener]struct{})
	s.mu.conns = make(map[*conn]struct{})
	return s
}

// Serve accepts connections on l until l is closed or the server is closed.
// It returns nil when stopped by Close, else the listener's error. Serve
// may be called concurrently for several listeners.
func (s *Server) Serve(l net.Listener) error {
	return s.serve(l, nil)
}

// ServeTLS is Serve for a listener on which TLS is required: a client
// must send NBD_OPT_STARTTLS before any other option but ABORT (they get
// NBD_REP_ERR_TLS_REQD) and then completes a TLS handshake with cfg.
func (s *Server) ServeTLS(l net.Listener, cfg *tls.Config) error {
	if cfg == nil {
		l.Close()
		return errors.New("nbd: ServeTLS without a TLS configuration")
	}
	return s.serve(l, x509Start(cfg))
}

// ServePSK is ServeTLS with pre-shared keys (TLS-PSK) instead of
// certificates: the handshake is GnuTLS's, with the keys of p.
func (s *Server) ServePSK(l net.Listener, p *gnutls.PSKServer) error {
	if p == nil {
		l.Close()
		return errors.New("nbd: ServePSK without keys")
	}
	return s.serve(l, pskStart(p))
}

func (s *Server) serve(l net.Listener, start tlsStart) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.mu.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.mu.listeners, l)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("nbd: accept", "err", err, "retry", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.startConn(nc, start)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.closed
}

// startConn serves nc in a goroutine of the server's group and returns a
// channel closed when that ends; nil when the server is closed (nc is
// closed then).
func (s *Server) startConn(nc net.Conn, start tlsStart) <-chan struct{} {
	c := s.newConn(nc)
	c.tlsStart = start
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		c.cancel()
		nc.Close()
		return nil
	}
	s.mu.conns[c] = struct{}{}
	done := make(chan struct{})
	s.conns.Go(func() {
		defer close(done)
		c.serve()
	})
	return done
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.mu.conns, c)
	s.mu.Unlock()
}

// Close stops every listener, stops reading new requests, waits until the
// requests already received have been handled and answered, and closes
// the connections. Close is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	s.mu.closed = true
	for l := range s.mu.listeners {
		l.Close()
	}
	for c := range s.mu.conns {
		c.shutdown()
	}
	s.mu.Unlock()
	s.conns.Wait()
	return nil
}

// conn is one client connection.
type conn struct {
	s   *Server
	raw net.Conn // the accepted connection: deadlines and abrupt closes
	// nc and br are raw, or the TLS connection over it once STARTTLS is
	// done; they change only during the handshake.
	nc      net.Conn
	br      *bufio.Reader
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	closing atomic.Bool

	// Set by the handshake, read-only afterwards.
	tlsStart   tlsStart // TLS required when set
	tls        bool     // STARTTLS done
	structured bool     // NBD_OPT_STRUCTURED_REPLY negotiated
	metaAlloc  bool     // base:allocation selected ...
	metaExport string   // ... for this export
	exp        Export
	name       string
	size       int64
	readOnly   bool

	wmu  sync.Mutex
	werr error         // first reply write error; later replies are dropped
	bw   *bufio.Writer // over TLS: gathers a reply's pieces into few records
}

func (s *Server) newConn(nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	remote := "?"
	if a := nc.RemoteAddr(); a != nil {
		remote = a.String()
	}
	return &conn{
		s:        s,
		raw:      nc,
		nc:       nc,
		br:       bufio.NewReaderSize(nc, handshakeBuffer),
		log:      s.log.With("remote", remote),
		ctx:      ctx,
		cancel:   cancel,
		readOnly: s.o.ReadOnly || (s.o.Writable != nil && !s.o.Writable()),
	}
}

// shutdown makes the connection stop reading: a blocked read returns, and
// the loops check closing before reading the next message.
func (c *conn) shutdown() {
	c.closing.Store(true)
	c.raw.SetReadDeadline(time.Now())
}

// setReadDeadline sets a read deadline without undoing a shutdown.
func (c *conn) setReadDeadline(t time.Time) {
	c.raw.SetReadDeadline(t)
	if c.closing.Load() {
		c.raw.SetReadDeadline(time.Now())
	}
}

func (c *conn) serve() {
	defer func() {
		c.cancel()
		// A TLS close sends an alert: do not wait long for a client
		// that does not read.
		c.raw.SetWriteDeadline(time.Now().Add(time.Second))
		c.nc.Close()
		if c.exp != nil {
			if err := c.exp.Close(); err != nil {
				c.log.Warn("nbd: closing export", "export", c.name, "err", err)
			}
		}
		c.s.removeConn(c)
	}()
	c.setReadDeadline(time.Now().Add(handshakeTimeout))
	c.raw.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	ok, err := c.handshake()
	if err != nil {
		c.log.Info("nbd: handshake ended", "err", err)
		c.lingerClose()
	}
	if !ok {
		return
	}
	c.setReadDeadline(time.Time{})
	c.raw.SetWriteDeadline(time.Time{})
	c.growBuffers()
	c.log.Debug("nbd: transmission", "export", c.name, "size", c.size)
	if err := c.transmit(); err != nil {
		c.log.Info("nbd: connection ended", "export", c.name, "err", err)
	}
}

// lingerClose ends a connection the server refuses so that the client
// still reads the replies sent before: it sends FIN after them and
// discards what the client goes on sending, for a bounded time and size.
// Closing with unread input instead makes the kernel send a reset, which
// can drop replies the client has not read yet.
func (c *conn) lingerClose() {
	if c.closing.Load() {
		return
	}
	if tc, ok := c.nc.(*tls.Conn); ok && c.tls {
		c.raw.SetWriteDeadline(time.Now().Add(time.Second))
		tc.CloseWrite()
	}
	cw, ok := c.raw.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.setReadDeadline(time.Now().Add(lingerTimeout))
	io.Copy(io.Discard, io.LimitReader(c.raw, lingerBytes))
}

// growBuffers gives the transmission phase a larger read buffer, keeping
// the requests the client already sent behind its last option, and over
// TLS a write buffer.
func (c *conn) growBuffers() {
	if c.tls {
		c.bw = bufio.NewWriterSize(c.nc, transmitBuffer)
	}
	var rd io.Reader = c.nc
	if n := c.br.Buffered(); n > 0 {
		pending, _ := c.br.Peek(n)
		rd = io.MultiReader(bytes.NewReader(bytes.Clone(pending)), c.nc)
	}
	c.br = bufio.NewReaderSize(rd, transmitBuffer)
}
