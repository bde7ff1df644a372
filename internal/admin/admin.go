// Package admin is the writer's local control endpoint: HTTP over a unix
// socket (what the CLI uses) and, optionally, a loopback TCP address (for
// metrics scrapers and the status page).
//
// Routes:
//
//	POST /v1/flush   run a durability barrier; 200 {"ok":true} or an error
//	GET  /v1/status  JSON Status
//	GET  /metrics    Prometheus metrics
//	GET  /           the HTML status page; its script and style sheet are
//	                 /static/page.js and /static/page.css (nothing else may
//	                 load: the Content-Security-Policy is strict), and it
//	                 polls the backend's /v1/monitor and /v1/history
//
// Later commands (checkpoints, reclaim, space) add handlers with Handle.
// Every request that changes something must carry the RequestHeader, which
// a browser cannot send cross-origin without a CORS preflight the server
// never grants; TCP requests must also name a loopback Host, which defeats
// DNS rebinding.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ebbfs.dev/ebbfs/internal/worker"
)

// RequestHeader must be present (any value) on state-changing requests.
const RequestHeader = "Ebbfs-Request"

// Status is what GET /v1/status returns.
type Status struct {
	Version    string    `json:"version"`
	PID        int       `json:"pid"`
	FSUUID     string    `json:"fs_uuid,omitempty"`
	Store      string    `json:"store"`
	Mountpoint string    `json:"mountpoint"`
	ReadOnly   bool      `json:"read_only"`
	StartedAt  time.Time `json:"started_at"`
	UptimeSec  float64   `json:"uptime_seconds"`
	NBD        []string  `json:"nbd,omitempty"`
	Admin      []string  `json:"admin,omitempty"`
	// Barriers counts every durability barrier of the process (fsync,
	// flush, the timer: what the monitor counts); LastBarrier is when the
	// last one that succeeded ended. Flushes, LastFlush and LastError are
	// the barriers asked for through this endpoint (`ebbfs flush`).
	Barriers    uint64    `json:"barriers"`
	LastBarrier time.Time `json:"last_barrier,omitzero"`
	Flushes     uint64    `json:"flushes"`
	LastFlush   time.Time `json:"last_flush,omitzero"`
	LastError   string    `json:"last_flush_error,omitempty"`
	// Extra holds fields contributed by other subsystems (engine stats,
	// reclamation progress) without changing this type.
	Extra map[string]any `json:"extra,omitempty"`
}

// Backend is what the built-in routes need from the running process.
type Backend interface {
	// Flush runs a durability barrier.
	Flush(ctx context.Context) error
	// Status describes the process.
	Status(ctx context.Context) Status
}

// Error is the JSON body of a failed request.
type Error struct {
	Error string `json:"error"`
}

// Options configure a Server.
type Options struct {
	// TCP is a host:port to listen on; "" disables TCP.
	TCP string
	// Unix is a socket path; "" disables the socket.
	Unix string
	// Registry receives the admin metrics and is served on /metrics.
	// Default: a new registry with the Go and process collectors.
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// FlushTimeout bounds one POST /v1/flush (default 5 minutes).
	FlushTimeout time.Duration
}

// Server is the admin endpoint.
type Server struct {
	o       Options
	b       Backend
	log     *slog.Logger
	mux     *http.ServeMux
	reqs    *prometheus.CounterVec
	flushes *prometheus.CounterVec
	flushDu prometheus.Histogram

	stopping     chan struct{} // closed when Close begins: streaming replies end
	stoppingOnce sync.Once

	mu struct {
		sync.Mutex
		started   bool
		closed    bool
		listeners []net.Listener
		servers   []*http.Server
		workers   []*worker.Worker // one per listener, serving it
	}
}

// New returns a server; it does not listen until Start.
func New(b Backend, o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if o.FlushTimeout <= 0 {
		o.FlushTimeout = 5 * time.Minute
	}
	s := &Server{o: o, b: b, log: o.Logger, mux: http.NewServeMux(), stopping: make(chan struct{})}
	s.reqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ebbfs_admin_requests_total", Help: "Admin endpoint requests by route and status code.",
	}, []string{"route", "code"})
	s.flushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ebbfs_admin_flushes_total", Help: "Barriers requested through the admin endpoint, by result.",
	}, []string{"result"})
	s.flushDu = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ebbfs_admin_flush_duration_seconds", Help: "Duration of barriers requested through the admin endpoint.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})
	// Both results exist from the start (rate() needs a first sample).
	s.flushes.WithLabelValues("ok")
	s.flushes.WithLabelValues("error")
	for _, c := range []prometheus.Collector{s.reqs, s.flushes, s.flushDu} {
		if err := o.Registry.Register(c); err != nil {
			s.log.Warn("admin: metric not registered", "err", err)
		}
	}
	s.HandleFunc("POST /v1/flush", s.handleFlush)
	s.HandleFunc("GET /v1/status", s.handleStatus)
	s.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry}))
	s.HandleFunc("GET /{$}", s.handlePage)
	s.HandleFunc("GET /static/{file}", s.handleStatic)
	// Go's profiler, for diagnosing a slow or stuck writer
	// (go tool pprof http://127.0.0.1:PORT/debug/pprof/profile).
	s.HandleFunc("GET /debug/pprof/", pprof.Index)
	s.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	s.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	s.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	s.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return s
}

// Registry returns the metrics registry served on /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.o.Registry }

// Handle registers a handler for a net/http ServeMux pattern such as
// "POST /v1/checkpoints". It must be called before Start.
func (s *Server) Handle(pattern string, h http.Handler) {
	route := pattern
	s.mux.Handle(pattern, s.instrument(route, h))
}

// HandleFunc is Handle for a function.
func (s *Server) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	s.Handle(pattern, http.HandlerFunc(h))
}

// HandleJSON registers a route whose function returns a value encoded as
// JSON with status 200, or an error written as Error with the status of
// StatusError (default 500). The request body, if any, is in r.Body.
func (s *Server) HandleJSON(pattern string, fn func(r *http.Request) (any, error)) {
	s.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		v, err := fn(r)
		if err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, v)
	})
}

// StatusError carries an HTTP status for a handler error.
type StatusError struct {
	Code int
	Err  error
}

func (e *StatusError) Error() string { return e.Err.Error() }
func (e *StatusError) Unwrap() error { return e.Err }

// WriteJSON writes v as JSON.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError writes err as an Error body.
func WriteError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var se *StatusError
	if errors.As(err, &se) && se.Code != 0 {
		code = se.Code
	}
	WriteJSON(w, code, Error{Error: err.Error()})
}

type codeWriter struct {
	http.ResponseWriter
	code int
}

func (c *codeWriter) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController flush a streaming reply.
func (c *codeWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *codeWriter) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.ResponseWriter.Write(b)
}

// instrument applies the request checks and counts the request.
func (s *Server) instrument(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &codeWriter{ResponseWriter: w}
		defer func() {
			code := cw.code
			if code == 0 {
				code = http.StatusOK
			}
			s.reqs.WithLabelValues(route, strconv.Itoa(code)).Inc()
		}()
		if err := checkRequest(r); err != nil {
			WriteError(cw, err)
			return
		}
		h.ServeHTTP(cw, r)
	})
}

type unixKey struct{}

func checkRequest(r *http.Request) error {
	if r.Context().Value(unixKey{}) == nil && !loopbackHost(r.Host) {
		return &StatusError{Code: http.StatusForbidden, Err: fmt.Errorf("host %q is not a loopback name", r.Host)}
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return nil
	}
	if r.Header.Get(RequestHeader) == "" {
		return &StatusError{Code: http.StatusForbidden, Err: fmt.Errorf("missing %s header", RequestHeader)}
	}
	return nil
}

func loopbackHost(h string) bool {
	host := h
	if hh, _, err := net.SplitHostPort(h); err == nil {
		host = hh
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) handleFlush(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.o.FlushTimeout)
	defer cancel()
	start := time.Now()
	err := s.b.Flush(ctx)
	s.flushDu.Observe(time.Since(start).Seconds())
	if err != nil {
		s.flushes.WithLabelValues("error").Inc()
		s.log.Error("admin: flush failed", "err", err)
		WriteError(w, fmt.Errorf("flush failed: %w", err))
		return
	}
	s.flushes.WithLabelValues("ok").Inc()
	WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "duration_seconds": time.Since(start).Seconds()})
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, s.b.Status(r.Context()))
}

// Start listens on the configured addresses and serves in the background.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.started || s.mu.closed {
		return errors.New("admin: server already started")
	}
	s.mu.started = true
	var ls []net.Listener
	fail := func(err error) error {
		for _, l := range ls {
			l.Close()
		}
		return err
	}
	if s.o.Unix != "" {
		l, err := listenUnix(s.o.Unix)
		if err != nil {
			return fail(err)
		}
		ls = append(ls, l)
	}
	if s.o.TCP != "" {
		l, err := net.Listen("tcp", s.o.TCP)
		if err != nil {
			return fail(fmt.Errorf("admin: listen %s: %w", s.o.TCP, err))
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		_, isUnix := l.(*net.UnixListener)
		hs := &http.Server{
			Handler:           s.mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		}
		if isUnix {
			hs.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
				return context.WithValue(ctx, unixKey{}, true)
			}
		}
		s.mu.listeners = append(s.mu.listeners, l)
		s.mu.servers = append(s.mu.servers, hs)
		// Serve returns when Close shuts hs down.
		s.mu.workers = append(s.mu.workers, worker.Start("admin-serve", nil, func(*worker.Worker) {
			if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("admin: serve", "addr", l.Addr().String(), "err", err)
			}
		}))
	}
	return nil
}

// Addrs returns the listening addresses: the socket path and the TCP
// address (with the real port if 0 was configured).
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.mu.listeners {
		out = append(out, l.Addr().String())
	}
	return out
}

// TCPAddr returns the TCP listen address, or "".
func (s *Server) TCPAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.mu.listeners {
		if _, ok := l.(*net.TCPListener); ok {
			return l.Addr().String()
		}
	}
	return ""
}

// Stopping is closed when Close begins: a handler that streams (GET
// /v1/trace) ends its reply then, so that Close does not wait for it.
func (s *Server) Stopping() <-chan struct{} { return s.stopping }

// Close stops accepting requests, waits for running ones up to ctx's
// deadline, and removes the socket file.
func (s *Server) Close(ctx context.Context) error {
	s.stoppingOnce.Do(func() { close(s.stopping) })
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	servers, workers := s.mu.servers, s.mu.workers
	s.mu.Unlock()
	var first error
	for _, hs := range servers {
		if err := hs.Shutdown(ctx); err != nil && first == nil {
			first = err
			hs.Close()
		}
	}
	for _, w := range workers {
		w.Close()
	}
	if s.o.Unix != "" {
		if err := os.Remove(s.o.Unix); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}

// listenUnix listens on a unix socket readable only by the owner. A stale
// socket left by a crashed process is replaced; a live one is an error.
func listenUnix(p string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if fi, err := os.Lstat(p); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("admin: %s exists and is not a socket", p)
		}
		c, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("admin: another process is serving %s", p)
		}
		if err := os.Remove(p); err != nil {
			return nil, fmt.Errorf("admin: remove stale socket: %w", err)
		}
	}
	l, err := net.Listen("unix", p)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", p, err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("admin: %w", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	return l, nil
}
