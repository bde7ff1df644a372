package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
)

// The S3 test server (versitygw, posix backend on the benchmark's disk)
// that the ebbfs-s3 target stores into; nil without -s3.
var s3srv struct {
	sync.Mutex
	s *s3test.Server
}

// s3Prefix is the key prefix of the ebbfs-s3 target's store in the
// server's bucket.
const s3Prefix = "bench"

// s3SegmentsDir is where the S3 test server's posix backend keeps the
// objects under s3Prefix/segments/ (one file per object, at its key under
// the bucket's directory), or "" when no server runs.
func s3SegmentsDir() string {
	s3srv.Lock()
	defer s3srv.Unlock()
	if s3srv.s == nil {
		return ""
	}
	return filepath.Join(s3srv.s.Dir, "data", s3srv.s.Bucket, s3Prefix, "segments")
}

// startS3 launches versitygw under dir and returns the [storage] section
// for an ebbfs on it. Its credentials go into this process's environment,
// which ebbfs init and ebbfs run inherit. Unless md5ETags, the server
// derives its ETags from checksums (s3test.ChecksumETags): with MD5 ETags
// it spent about 4 s of CPU per GiB uploaded hashing, on the two cores
// ebbfs and the client share, where a remote store's hashing costs the
// machine nothing.
func startS3(dir string, md5ETags bool) (string, error) {
	s3srv.Lock()
	defer s3srv.Unlock()
	var opts []string
	if !md5ETags {
		opts = append(opts, s3test.ChecksumETags)
	}
	srv, err := s3test.LaunchWith(dir, "127.0.0.1", opts...)
	if err != nil {
		return "", fmt.Errorf("S3 test server: %w (%s; -s3=false runs without it)", err, s3test.InstallHint)
	}
	s3srv.s = srv
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("url = %q\nendpoint = %q\nregion = %q\n", srv.URL(s3Prefix), srv.Endpoint, srv.Region), nil
}

// stopS3 stops the S3 test server, if one runs.
func stopS3() {
	s3srv.Lock()
	defer s3srv.Unlock()
	if s3srv.s != nil {
		if err := s3srv.s.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "mountbench: stopping the S3 test server: %v\n", err)
		}
		s3srv.s = nil
	}
}

// profileCPU fetches a CPU profile of seconds from ebbfs's admin socket
// into path, in the background; wait blocks until it is written.
func profileCPU(sock, path string, seconds int) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr, Timeout: time.Duration(seconds+30) * time.Second}
		resp, err := cl.Get(fmt.Sprintf("http://ebbfs/debug/pprof/profile?seconds=%d", seconds))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
			return
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			done <- err
			return
		}
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return func() error { return <-done }
}
