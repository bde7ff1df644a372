package objstore_test

import (
	"bytes"
	"context"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/objstore"
)

// uploadProxy sits between the S3 client and the test server: it records
// the payload-hash header of every PUT and can swallow the response of
// the next CompleteMultipartUpload after forwarding it.
type uploadProxy struct {
	mu           sync.Mutex
	payloadHash  map[string]string // path -> X-Amz-Content-Sha256 of its last PUT
	dropComplete atomic.Int32
}

func startUploadProxy(t *testing.T, srv *s3test.Server) (*uploadProxy, string) {
	target, _ := url.Parse(srv.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &uploadProxy{payloadHash: map[string]string{}}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			p.mu.Lock()
			p.payloadHash[r.URL.Path] = r.Header.Get("X-Amz-Content-Sha256")
			p.mu.Unlock()
		}
		if r.Method == http.MethodPost && r.URL.Query().Has("uploadId") && p.dropComplete.Add(-1) >= 0 {
			rp.ServeHTTP(httptest.NewRecorder(), r) // the completion lands...
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close() // ...its answer is lost
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return p, front.URL
}

func (p *uploadProxy) hashOf(suffix string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for path, h := range p.payloadHash {
		if strings.HasSuffix(path, suffix) {
			return h
		}
	}
	return ""
}

// Large bodies go unsigned (no SHA-256 over plain HTTP; the server checks
// the CRC32), small ones stay signed; both read back intact, and a
// multipart put-if-absent whose completion response is lost is still
// recognised as this writer's (its ETag, computed only then, matches).
func TestS3UnsignedPayloadsAndLazyETag(t *testing.T) {
	srv := s3test.Start(t)
	p, endpoint := startUploadProxy(t, srv)
	cfg := srv.Config("up/")
	cfg.Endpoint = endpoint
	cfg.PartSize = objstore.MinS3PartSize
	cfg.MaxBackoff = 100 * time.Millisecond
	s := newS3(t, cfg)
	ctx := context.Background()

	big := make([]byte, 2<<20)
	rand.New(rand.NewSource(3)).Read(big)
	small := []byte(`{"epoch": 7}`)
	if _, err := s.Put(ctx, "segments/01/big", big, objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "writer.lease", small, objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	if h := p.hashOf("/segments/01/big"); h != "UNSIGNED-PAYLOAD" {
		t.Errorf("2 MiB upload sent with payload hash %q, want UNSIGNED-PAYLOAD", h)
	}
	if h := p.hashOf("/writer.lease"); len(h) != 64 || strings.Contains(h, "UNSIGNED") {
		t.Errorf("small upload sent with payload hash %q, want its SHA-256", h)
	}
	for key, want := range map[string][]byte{"segments/01/big": big, "writer.lease": small} {
		if got, err := s.Get(ctx, key); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s read back %d bytes, %v", key, len(got), err)
		}
	}

	// Multipart (12 MiB in 5 MiB parts): parts unsigned too.
	mp := make([]byte, 12<<20)
	rand.New(rand.NewSource(4)).Read(mp)
	p.dropComplete.Store(1)
	etag, err := s.Put(ctx, "segments/02/multi", mp, objstore.PutOptions{IfAbsent: true})
	if err != nil {
		t.Fatalf("multipart IfAbsent with a lost completion response: %v", err)
	}
	if p.dropComplete.Load() >= 0 {
		t.Fatal("the proxy dropped no completion response")
	}
	if !strings.HasSuffix(etag, "-3") {
		t.Fatalf("multipart ETag %q", etag)
	}
	if h := p.hashOf("/segments/02/multi"); h != "UNSIGNED-PAYLOAD" {
		t.Errorf("part sent with payload hash %q, want UNSIGNED-PAYLOAD", h)
	}
	if got, err := s.Get(ctx, "segments/02/multi"); err != nil || !bytes.Equal(got, mp) {
		t.Fatalf("multipart object read back %d bytes, %v", len(got), err)
	}
	// A genuine second writer still loses.
	if _, err := s.Put(ctx, "segments/02/multi", mp[:6<<20], objstore.PutOptions{IfAbsent: true}); !objstore.IsPreconditionFailed(err) {
		t.Fatalf("second multipart writer: %v; want precondition failed", err)
	}
}
