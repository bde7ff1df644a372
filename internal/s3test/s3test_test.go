package s3test_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/objstore"
)

func TestStart(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	if srv.Endpoint == "" || srv.AccessKey == "" || srv.SecretKey == "" || srv.Bucket == "" {
		t.Fatalf("incomplete server description: %+v", srv)
	}
	// In-process: the returned config carries the credentials.
	s, err := objstore.NewS3(ctx, srv.Config("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "ebbfs.fs", []byte("d"), objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	// Through Open and the default credential chain, as the real binary
	// would see it with srv.Env() in its environment.
	srv.Setenv(t)
	o, err := objstore.Open(ctx, srv.URL("x"), srv.Endpoint, srv.Region)
	if err != nil {
		t.Fatal(err)
	}
	got, err := o.Get(ctx, "ebbfs.fs")
	if err != nil || string(got) != "d" {
		t.Fatalf("Get through Open = %q, %v", got, err)
	}
	// Wrong credentials are refused, so the server really checks them.
	bad := srv.Config("x")
	bad.SecretAccessKey = "wrong"
	bad.MaxAttempts = 1
	b, err := objstore.NewS3(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "ebbfs.fs"); err == nil || objstore.IsNotFound(err) {
		t.Fatalf("Get with a wrong secret = %v; want an auth error", err)
	}
}

func TestStopIsIdempotentAndKills(t *testing.T) {
	if _, err := s3test.FindBinary(); err != nil && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	srv, err := s3test.Launch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second Stop = %v", err)
	}
	cfg := srv.Config("")
	cfg.MaxAttempts = 1
	s, err := objstore.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(context.Background(), "x"); !objstore.IsUnavailable(err) {
		t.Fatalf("Head after Stop = %v; want unavailable", err)
	}
}

func TestFindBinaryEnv(t *testing.T) {
	t.Setenv("EBBFS_VERSITYGW", filepath.Join(t.TempDir(), "nope"))
	if _, err := s3test.FindBinary(); err == nil {
		t.Fatal("FindBinary with a missing EBBFS_VERSITYGW succeeded")
	}
	p, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	t.Setenv("EBBFS_VERSITYGW", p)
	if got, err := s3test.FindBinary(); err != nil || got != p {
		t.Fatalf("FindBinary = %q, %v; want %q", got, err, p)
	}
}

// TestKillRestartKeepsData: a server killed with SIGKILL and restarted
// answers on the same endpoint with the same credentials and still holds
// what was stored before.
func TestKillRestartKeepsData(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	cfg := srv.Config("k")
	cfg.MaxAttempts = 1
	s, err := objstore.NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "obj", []byte("kept"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "obj"); !objstore.IsUnavailable(err) {
		t.Fatalf("Get from a killed server = %v; want unavailable", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "obj"); err != nil || string(got) != "kept" {
		t.Fatalf("Get after restart = %q, %v", got, err)
	}
}
