package objstore_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/objstore/storetest"
)

func newS3(t *testing.T, cfg objstore.S3Config) *objstore.S3 {
	t.Helper()
	s, err := objstore.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Conformance(t *testing.T) {
	srv := s3test.Start(t)
	n := 0
	storetest.Run(t, func(t *testing.T) objstore.Store {
		// A fresh bucket per subtest; every other one under a prefix, with
		// a decoy object outside the prefix that must stay invisible.
		n++
		bucket := fmt.Sprintf("conf-%d", n)
		if err := srv.CreateBucket(context.Background(), bucket); err != nil {
			t.Fatal(err)
		}
		cfg := srv.Config("")
		cfg.Bucket = bucket
		if n%2 == 0 {
			cfg.Prefix = "fs1"
			decoy := newS3(t, cfg)
			other := cfg
			other.Prefix = "zz-other/"
			if _, err := newS3(t, other).Put(context.Background(), "a/b", []byte("decoy"), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			return decoy
		}
		return newS3(t, cfg)
	})
}

func TestS3Multipart(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	cfg := srv.Config("mp/")
	cfg.PartSize = objstore.MinS3PartSize
	s := newS3(t, cfg)
	data := make([]byte, 12<<20)
	rand.New(rand.NewSource(7)).Read(data)
	etag, err := s.Put(ctx, "segments/00/big", data, objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "segments/00/big")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("multipart object read back as %d different bytes", len(got))
	}
	// A range across the first part boundary.
	off := int64(objstore.MinS3PartSize - 100)
	r, err := s.GetRange(ctx, "segments/00/big", off, 300)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r, data[off:off+300]) {
		t.Fatal("range across a part boundary differs")
	}
	h, err := s.Head(ctx, "segments/00/big")
	if err != nil {
		t.Fatal(err)
	}
	if h.Size != int64(len(data)) || h.ETag != etag {
		t.Fatalf("Head = %+v; want size %d, etag %q", h, len(data), etag)
	}
	// S3's multipart ETag, which Put relies on to recognise its own
	// completed upload after a lost response: md5 of the part md5s, "-N".
	var sums []byte
	for i := 0; i < len(data); i += objstore.MinS3PartSize {
		sum := md5.Sum(data[i:min(i+objstore.MinS3PartSize, len(data))])
		sums = append(sums, sum[:]...)
	}
	all := md5.Sum(sums)
	if want := hex.EncodeToString(all[:]) + "-3"; etag != want {
		t.Fatalf("multipart ETag %q; want %q", etag, want)
	}
	// Conditional multipart: the condition is on CompleteMultipartUpload.
	if _, err := s.Put(ctx, "segments/00/big", data[:6<<20], objstore.PutOptions{IfAbsent: true}); !objstore.IsPreconditionFailed(err) {
		t.Fatalf("multipart IfAbsent over an existing object: %v; want precondition failed", err)
	}
	if got, _ := s.Head(ctx, "segments/00/big"); got.Size != int64(len(data)) {
		t.Fatalf("losing multipart IfAbsent changed the object: %+v", got)
	}
	if _, err := s.Put(ctx, "segments/00/new", data[:6<<20], objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatalf("multipart IfAbsent on a new key: %v", err)
	}
	e2, err := s.Put(ctx, "segments/00/big", data[:11<<20], objstore.PutOptions{IfMatch: etag})
	if err != nil {
		t.Fatalf("multipart IfMatch with the current ETag: %v", err)
	}
	if _, err := s.Put(ctx, "segments/00/big", data[:6<<20], objstore.PutOptions{IfMatch: etag}); !objstore.IsPreconditionFailed(err) {
		t.Fatalf("multipart IfMatch with a stale ETag: %v; want precondition failed", err)
	}
	if h, _ := s.Head(ctx, "segments/00/big"); h.ETag != e2 || h.Size != 11<<20 {
		t.Fatalf("after IfMatch, Head = %+v; want etag %q size %d", h, e2, 11<<20)
	}
	// No multipart uploads are left behind by the losers.
	ups, err := s.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &cfg.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Fatalf("%d multipart uploads left behind", len(ups.Uploads))
	}
}

func TestS3DeleteManyBatches(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	s := newS3(t, srv.Config("dm"))
	const n = 1005
	t0 := time.Now()
	keys := make([]string, n)
	sem := make(chan struct{}, 4)
	errc := make(chan error, n)
	for i := range n {
		keys[i] = fmt.Sprintf("segments/%02x/%05d", i%256, i)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			_, err := s.Put(ctx, keys[i], []byte("x"), objstore.PutOptions{})
			errc <- err
		}()
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("puts done after %v", time.Since(t0))
	c := objstore.NewCounting(s)
	if err := c.DeleteMany(ctx, append(keys, "segments/missing")); err != nil {
		t.Fatal(err)
	}
	objs, err := objstore.ListAll(ctx, s, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("delete and list done after %v", time.Since(t0))
	if len(objs) != 0 {
		t.Fatalf("%d objects left after DeleteMany", len(objs))
	}
	if got := c.Snapshot(); got.DeleteMany != 1 || got.DeletedObjects != n+1 {
		t.Fatalf("counts %+v; want 1 call for %d objects", got, n+1)
	}
}

// A server that is unreachable (connection refused) for a while is bridged
// by the SDK's retries, for plain and conditional writes alike.
func TestS3RetriesConnectionRefused(t *testing.T) {
	srv := s3test.Start(t)
	target, _ := url.Parse(srv.Endpoint)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused until the proxy comes up
	cfg := srv.Config("retry/")
	cfg.Endpoint = "http://" + addr
	cfg.MaxBackoff = 300 * time.Millisecond
	s := newS3(t, cfg)
	proxy := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	t.Cleanup(func() { proxy.Close() })
	go func() {
		time.Sleep(time.Second)
		pl, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("proxy listen: %v", err)
			return
		}
		_ = proxy.Serve(pl)
	}()
	ctx := context.Background()
	start := time.Now()
	if _, err := s.Put(ctx, "writer.lease", []byte("epoch 1"), objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatalf("conditional Put during a short outage: %v", err)
	}
	if time.Since(start) < 900*time.Millisecond {
		t.Fatalf("Put succeeded after %v, before the server was reachable", time.Since(start))
	}
	if _, err := s.Put(ctx, "segments/00/a", []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// With the attempts exhausted, the error is ErrUnavailable.
	cfg.Endpoint = "http://" + freeAddr(t)
	cfg.MaxAttempts = 2
	dead := newS3(t, cfg)
	if _, err := dead.Get(ctx, "x"); !objstore.IsUnavailable(err) {
		t.Fatalf("Get from an unreachable server: %v; want unavailable", err)
	}
	if _, err := dead.Put(ctx, "x", nil, objstore.PutOptions{IfAbsent: true}); !objstore.IsUnavailable(err) {
		t.Fatalf("conditional Put to an unreachable server: %v; want unavailable", err)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A conditional Put whose first attempt lands but whose response is lost is
// retried, sees 412, and is still reported as the success it was: on a
// server whose ETags are MD5s, and on one whose ETags are not (AWS under
// SSE-KMS; versitygw's checksum ETags), where it reads the object back.
func TestS3ConditionalPutLostResponse(t *testing.T) {
	t.Run("md5-etags", func(t *testing.T) { testConditionalPutLostResponse(t, s3test.Start(t)) })
	t.Run("checksum-etags", func(t *testing.T) {
		srv := s3test.StartWith(t, s3test.ChecksumETags)
		s := newS3(t, srv.Config("probe/"))
		data := []byte("not an md5")
		etag, err := s.Put(context.Background(), "probe", data, objstore.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sum := md5.Sum(data); etag == hex.EncodeToString(sum[:]) {
			t.Fatalf("the server's ETag %q is the MD5 of the object: not the case under test", etag)
		}
		testConditionalPutLostResponse(t, srv)
	})
}

func testConditionalPutLostResponse(t *testing.T, srv *s3test.Server) {
	target, _ := url.Parse(srv.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(target)
	var drop atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && drop.Add(-1) >= 0 {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r) // the write reaches the server...
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close() // ...but its answer never reaches the client
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	cfg := srv.Config("lost/")
	cfg.Endpoint = front.URL
	cfg.MaxBackoff = 100 * time.Millisecond
	s := newS3(t, cfg)
	ctx := context.Background()

	drop.Store(1)
	etag, err := s.Put(ctx, "meta/journal/1", []byte("journal 1 by writer A"), objstore.PutOptions{IfAbsent: true})
	if err != nil {
		t.Fatalf("IfAbsent Put with a lost response: %v", err)
	}
	if drop.Load() >= 0 {
		t.Fatal("the proxy dropped no response")
	}
	// A genuine loser still loses.
	if _, err := s.Put(ctx, "meta/journal/1", []byte("journal 1 by writer B"), objstore.PutOptions{IfAbsent: true}); !objstore.IsPreconditionFailed(err) {
		t.Fatalf("second writer: %v; want precondition failed", err)
	}
	drop.Store(1)
	if _, err := s.Put(ctx, "meta/journal/1", []byte("journal 1 v2"), objstore.PutOptions{IfMatch: etag}); err != nil {
		t.Fatalf("IfMatch Put with a lost response: %v", err)
	}
	got, err := s.Get(ctx, "meta/journal/1")
	if err != nil || string(got) != "journal 1 v2" {
		t.Fatalf("Get = %q, %v", got, err)
	}
}

// A server that takes a request and never answers (a network cut after the
// request went out) runs out the response timeout. That is an outage: it is
// retried, and once the attempts run out the error wraps ErrUnavailable, even
// though net/http's timeout matches context.DeadlineExceeded. Only the
// caller's own deadline makes a request final.
func TestS3SilentServerIsUnavailable(t *testing.T) {
	srv := s3test.Start(t)
	target, _ := url.Parse(srv.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(target)
	var stall atomic.Int32
	release := make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stall.Add(-1) >= 0 {
			select { // say nothing until the client gives up
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(release); front.Close() })
	cfg := srv.Config("silent/")
	cfg.Endpoint = front.URL
	cfg.MaxBackoff = 50 * time.Millisecond
	cfg.ResponseTimeout = 200 * time.Millisecond
	cfg.MaxAttempts = 3
	s := newS3(t, cfg)
	ctx := context.Background()

	// One silent attempt, then an answer: both kinds of Put succeed.
	for _, opts := range []objstore.PutOptions{{}, {IfAbsent: true}} {
		stall.Store(1)
		key := fmt.Sprintf("segments/00/silent-once-%v", opts.IfAbsent)
		if _, err := s.Put(ctx, key, []byte("x"), opts); err != nil {
			t.Fatalf("Put %+v after one silent attempt: %v", opts, err)
		}
		if stall.Load() >= 0 {
			t.Fatal("the server answered the first attempt")
		}
	}
	// Silent on every attempt: unavailable, not a permanent failure.
	for _, opts := range []objstore.PutOptions{{}, {IfAbsent: true}} {
		stall.Store(100)
		_, err := s.Put(ctx, "segments/00/silent-always", []byte("x"), opts)
		if !objstore.IsUnavailable(err) {
			t.Fatalf("Put %+v to a silent server: %v; want unavailable", opts, err)
		}
	}
	stall.Store(100)
	if _, err := s.Get(ctx, "segments/00/silent-once-false"); !objstore.IsUnavailable(err) {
		t.Fatalf("Get from a silent server: %v; want unavailable", err)
	}
	// The caller's own deadline is final: not unavailable.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := s.Get(short, "segments/00/silent-once-false")
	if err == nil || objstore.IsUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get past the caller's deadline: %v; want DeadlineExceeded, not unavailable", err)
	}
}

func TestS3Config(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []objstore.S3Config{
		{},
		{Bucket: "b", PartSize: 1 << 20},
		{Bucket: "b", AccessKeyID: "only-key"},
	} {
		if _, err := objstore.NewS3(ctx, cfg); err == nil {
			t.Errorf("NewS3(%+v) succeeded; want an error", cfg)
		}
	}
	if _, err := objstore.NewS3(ctx, objstore.S3Config{Bucket: "b", Endpoint: "http://127.0.0.1:1", PathStyle: true}); err != nil {
		t.Errorf("NewS3 with a valid config: %v", err)
	}
}
