package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type fakeBackend struct {
	flushes atomic.Int64
	fail    atomic.Bool
}

func (f *fakeBackend) Flush(ctx context.Context) error {
	f.flushes.Add(1)
	if f.fail.Load() {
		return errors.New("store unreachable")
	}
	return nil
}

func (f *fakeBackend) Status(ctx context.Context) Status {
	return Status{Version: "test", Mountpoint: "/mnt/<x>", Store: "file:///s", Barriers: uint64(f.flushes.Load()), Extra: map[string]any{"k": 1}}
}

func start(t *testing.T) (*Server, *fakeBackend, string) {
	t.Helper()
	b := &fakeBackend{}
	sock := filepath.Join(t.TempDir(), "admin.sock")
	s := New(b, Options{TCP: "127.0.0.1:0", Unix: sock})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, b, sock
}

func TestFlushAndStatus(t *testing.T) {
	s, b, sock := start(t)
	ctx := context.Background()
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi, err)
	}
	for _, c := range []*Client{NewClient(sock, ""), NewClient("", s.TCPAddr()), NewClient(filepath.Join(t.TempDir(), "none.sock"), s.TCPAddr())} {
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("flush via %s: %v", c.where(), err)
		}
	}
	if b.flushes.Load() != 3 {
		t.Fatalf("backend saw %d flushes, want 3", b.flushes.Load())
	}
	st, err := NewClient(sock, "").Status(ctx)
	if err != nil || st.Version != "test" || st.Barriers != 3 {
		t.Fatalf("status = %+v, %v", st, err)
	}
	b.fail.Store(true)
	err = NewClient(sock, "").Flush(ctx)
	if err == nil || !strings.Contains(err.Error(), "store unreachable") {
		t.Fatalf("failing flush returned %v", err)
	}
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusInternalServerError {
		t.Fatalf("failing flush error %#v, want a 500 StatusError", err)
	}
}

func get(t *testing.T, url string, hdr map[string]string, method string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if h, ok := hdr["Host"]; ok {
		req.Host = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPRules(t *testing.T) {
	s, b, _ := start(t)
	base := "http://" + s.TCPAddr()
	if code, body := get(t, base+"/", nil, "GET"); code != 200 || !strings.Contains(body, "/mnt/&lt;x&gt;") {
		t.Errorf("page: %d %q", code, body)
	}
	if code, body := get(t, base+"/metrics", nil, "GET"); code != 200 || !strings.Contains(body, "ebbfs_admin_requests_total") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("metrics: %d, missing series in %q", code, body[:min(len(body), 300)])
	}
	if code, _ := get(t, base+"/v1/flush", nil, "POST"); code != http.StatusForbidden {
		t.Errorf("POST without %s: %d, want 403", RequestHeader, code)
	}
	if code, _ := get(t, base+"/v1/flush", map[string]string{RequestHeader: "1", "Host": "evil.example:80"}, "POST"); code != http.StatusForbidden {
		t.Errorf("POST with foreign Host: %d, want 403", code)
	}
	if code, _ := get(t, base+"/v1/flush", nil, "GET"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/flush: %d, want 405", code)
	}
	if code, body := get(t, base+"/debug/pprof/goroutine?debug=1", nil, "GET"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Errorf("goroutine profile: %d %q", code, body[:min(len(body), 200)])
	}
	if code, _ := get(t, base+"/debug/pprof/heap", map[string]string{"Host": "evil.example:80"}, "GET"); code != http.StatusForbidden {
		t.Errorf("profile with foreign Host: %d, want 403", code)
	}
	if code, _ := get(t, base+"/nope", nil, "GET"); code != http.StatusNotFound {
		t.Errorf("unknown route: %d, want 404", code)
	}
	if b.flushes.Load() != 0 {
		t.Errorf("rejected requests flushed %d times", b.flushes.Load())
	}
	if code, _ := get(t, base+"/v1/flush", map[string]string{RequestHeader: "1"}, "POST"); code != 200 {
		t.Errorf("good POST: %d", code)
	}
}

func TestHandleJSONAndPlugins(t *testing.T) {
	b := &fakeBackend{}
	sock := filepath.Join(t.TempDir(), "a.sock")
	s := New(b, Options{Unix: sock})
	s.HandleJSON("GET /v1/checkpoints", func(r *http.Request) (any, error) {
		return []string{"a", "b"}, nil
	})
	s.HandleJSON("DELETE /v1/checkpoints/{name}", func(r *http.Request) (any, error) {
		return nil, &StatusError{Code: http.StatusNotFound, Err: errors.New("no checkpoint " + r.PathValue("name"))}
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	c := NewClient(sock, "")
	var names []string
	if err := c.Do(context.Background(), "GET", "/v1/checkpoints", nil, &names); err != nil || len(names) != 2 {
		t.Fatalf("plugin GET: %v %v", names, err)
	}
	err := c.Do(context.Background(), "DELETE", "/v1/checkpoints/x", nil, nil)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 404 || !strings.Contains(err.Error(), "no checkpoint x") {
		t.Fatalf("plugin DELETE: %v", err)
	}
}

func TestNotRunningAndStaleSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := NewClient(sock, "").Flush(ctx); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("flush with no server: %v, want ErrNotRunning", err)
	}
	// A server that died without removing its socket leaves a stale file.
	s1 := New(&fakeBackend{}, Options{Unix: sock})
	if err := s1.Start(); err != nil {
		t.Fatal(err)
	}
	// A second server on a live socket is refused.
	s2 := New(&fakeBackend{}, Options{Unix: sock})
	if err := s2.Start(); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second server on a live socket: %v", err)
	}
	s1.mu.Lock()
	for _, l := range s1.mu.listeners {
		l.Close() // closes without unlinking
	}
	s1.mu.Unlock()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("socket should remain: %v", err)
	}
	if err := NewClient(sock, "").Flush(ctx); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("flush on a stale socket: %v, want ErrNotRunning", err)
	}
	s3 := New(&fakeBackend{}, Options{Unix: sock})
	if err := s3.Start(); err != nil {
		t.Fatalf("server over a stale socket: %v", err)
	}
	if err := NewClient(sock, "").Wait(ctx); err != nil {
		t.Fatal(err)
	}
	s3.Close(ctx)
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the socket: %v", err)
	}
	s1.Close(ctx)
	// A regular file in the socket's place is never removed.
	if err := os.WriteFile(sock, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := New(&fakeBackend{}, Options{Unix: sock}).Start(); err == nil {
		t.Fatal("server replaced a regular file")
	}
}
