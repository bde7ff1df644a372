package main

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"strings"

	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/objstore"
)

// openStore opens the configured object store.
//
// TODO(objstore.Open): switch to objstore.Open(ctx, url, endpoint, region)
// once it lands. Until then: file:// is the local-directory store; s3://
// uses path-style addressing when an endpoint is configured (what
// self-hosted servers need) and virtual-hosted style on AWS.
func openStore(ctx context.Context, c *config.Config) (objstore.Store, error) {
	u, err := url.Parse(c.Storage.URL)
	if err != nil {
		return nil, fmt.Errorf("storage.url %q: %w", c.Storage.URL, err)
	}
	switch u.Scheme {
	case "file":
		s, err := objstore.NewLocal(path.Clean(u.Path))
		if err != nil {
			return nil, fmt.Errorf("opening store %s: %w", c.Storage.URL, err)
		}
		return s, nil
	case "s3":
		s, err := objstore.NewS3(ctx, objstore.S3Config{
			Bucket:    u.Host,
			Prefix:    strings.Trim(u.Path, "/"),
			Endpoint:  c.Storage.Endpoint,
			Region:    c.Storage.Region,
			PathStyle: c.Storage.Endpoint != "",
		})
		if err != nil {
			return nil, fmt.Errorf("opening store %s: %w", c.Storage.URL, err)
		}
		return s, nil
	default:
		return nil, fmt.Errorf("opening store %s: unsupported scheme %q", c.Storage.URL, u.Scheme)
	}
}
