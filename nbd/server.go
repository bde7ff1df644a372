package nbd

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

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
	// handshakeTimeout bounds the whole option negotiation.
	handshakeTimeout = 30 * time.Second
	// writeTimeout bounds writing one reply to a client that does not read.
	writeTimeout = 60 * time.Second
)

// Server serves a Backend over the NBD protocol (fixed newstyle
// negotiation, simple replies).
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
		s.startConn(nc)
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
func (s *Server) startConn(nc net.Conn) <-chan struct{} {
	c := s.newConn(nc)
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

// serveConn serves one connection to its end (tests and fuzzing).
func (s *Server) serveConn(nc net.Conn) {
	if done := s.startConn(nc); done != nil {
		<-done
	}
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
	s       *Server
	nc      net.Conn
	br      *bufio.Reader
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	closing atomic.Bool

	// Set by the handshake, read-only afterwards.
	exp      Export
	name     string
	size     int64
	readOnly bool

	wmu  sync.Mutex
	werr error // first reply write error; later replies are dropped
}

func (s *Server) newConn(nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	remote := "?"
	if a := nc.RemoteAddr(); a != nil {
		remote = a.String()
	}
	return &conn{
		s:        s,
		nc:       nc,
		br:       bufio.NewReaderSize(nc, 64<<10),
		log:      s.log.With("remote", remote),
		ctx:      ctx,
		cancel:   cancel,
		readOnly: s.o.ReadOnly,
	}
}

// shutdown makes the connection stop reading: a blocked read returns, and
// the loops check closing before reading the next message.
func (c *conn) shutdown() {
	c.closing.Store(true)
	c.nc.SetReadDeadline(time.Now())
}

// setReadDeadline sets a read deadline without undoing a shutdown.
func (c *conn) setReadDeadline(t time.Time) {
	c.nc.SetReadDeadline(t)
	if c.closing.Load() {
		c.nc.SetReadDeadline(time.Now())
	}
}

func (c *conn) serve() {
	defer func() {
		c.cancel()
		c.nc.Close()
		if c.exp != nil {
			if err := c.exp.Close(); err != nil {
				c.log.Warn("nbd: closing export", "export", c.name, "err", err)
			}
		}
		c.s.removeConn(c)
	}()
	c.setReadDeadline(time.Now().Add(handshakeTimeout))
	c.nc.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	ok, err := c.handshake()
	if err != nil {
		c.log.Info("nbd: handshake ended", "err", err)
	}
	if !ok {
		return
	}
	c.setReadDeadline(time.Time{})
	c.nc.SetWriteDeadline(time.Time{})
	c.log.Debug("nbd: transmission", "export", c.name, "size", c.size)
	if err := c.transmit(); err != nil {
		c.log.Info("nbd: connection ended", "export", c.name, "err", err)
	}
}
