package objstore_test

import (
	"context"
	"path/filepath"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
)

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := objstore.Open(ctx, "file://"+dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	l, ok := s.(*objstore.Local)
	if !ok || l.Root() != dir {
		t.Fatalf("Open(file://%s) = %T %v", dir, s, s)
	}
	s, err = objstore.Open(ctx, "s3://my-bucket/fs/one/", "http://127.0.0.1:7070", "eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	if s3s, ok := s.(*objstore.S3); !ok || s3s.Bucket() != "my-bucket" || s3s.Prefix() != "fs/one/" {
		t.Fatalf("Open(s3://my-bucket/fs/one/) = %T %+v", s, s)
	}
	s, err = objstore.Open(ctx, "s3://b", "", "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	if s3s := s.(*objstore.S3); s3s.Bucket() != "b" || s3s.Prefix() != "" {
		t.Fatalf("Open(s3://b) = bucket %q prefix %q", s3s.Bucket(), s3s.Prefix())
	}
	for _, bad := range []string{
		"", "/abs/path", "relative/dir", "file://relative/dir", "file:relative", "file://",
		"s3://", "s3:///prefix", "s3://b:9000/p", "s3://user@b/p", "s3://b/p?x=1",
		"gs://bucket/p", "http://host/p", "s3://b/a//c", "file://" + filepath.Join(dir, "x") + "#frag", "::",
	} {
		if s, err := objstore.Open(ctx, bad, "", ""); err == nil {
			t.Errorf("Open(%q) = %T, nil; want an error", bad, s)
		}
	}
	if _, err := objstore.Open(ctx, "file://"+dir, "http://127.0.0.1:1", ""); err == nil {
		t.Error("Open(file://) with an endpoint succeeded")
	}
}
