package objstore

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// Open opens the store a URL names:
//
//	file:///abs/path       a Local store rooted at /abs/path
//	s3://bucket            an S3 store at the bucket root
//	s3://bucket/prefix     an S3 store for keys under prefix/
//
// endpoint and region apply to s3 URLs only (empty: the SDK's defaults);
// a custom endpoint implies path-style addressing. Credentials come from
// the SDK's default chain (AWS_ACCESS_KEY_ID and friends, shared config,
// instance role).
func Open(ctx context.Context, rawURL, endpoint, region string) (Store, error) {
	return OpenProfile(ctx, rawURL, endpoint, region, "")
}

// OpenProfile is Open with the credentials of a named shared AWS
// configuration profile for an s3:// store (a mirror in another account
// or at another provider); "" means the standard chain.
func OpenProfile(ctx context.Context, rawURL, endpoint, region, profile string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("objstore: bad store URL %q: %w", rawURL, err)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("objstore: bad store URL %q: no user, query or fragment allowed", rawURL)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("objstore: bad store URL %q: want file:///absolute/path (three slashes)", rawURL)
		}
		if u.Path == "" || !filepath.IsAbs(u.Path) || u.Opaque != "" {
			return nil, fmt.Errorf("objstore: bad store URL %q: want file:///absolute/path", rawURL)
		}
		if endpoint != "" {
			return nil, fmt.Errorf("objstore: an endpoint (%q) makes no sense for a file:// store", endpoint)
		}
		return NewLocal(filepath.Clean(u.Path))
	case "s3":
		if u.Host == "" || u.Opaque != "" {
			return nil, fmt.Errorf("objstore: bad store URL %q: want s3://bucket[/prefix]", rawURL)
		}
		if u.Port() != "" {
			return nil, fmt.Errorf("objstore: bad store URL %q: the bucket cannot have a port; give the server as the endpoint", rawURL)
		}
		prefix := strings.Trim(u.Path, "/")
		if strings.Contains(prefix, "//") {
			return nil, fmt.Errorf("objstore: bad store URL %q: empty path component in prefix", rawURL)
		}
		return NewS3(ctx, S3Config{
			Bucket:    u.Host,
			Prefix:    prefix,
			Endpoint:  endpoint,
			Region:    region,
			PathStyle: endpoint != "",
			Profile:   profile,
		})
	case "":
		return nil, fmt.Errorf("objstore: bad store URL %q: no scheme; want file:///path or s3://bucket/prefix", rawURL)
	default:
		return nil, fmt.Errorf("objstore: unsupported store URL scheme %q in %q; want file or s3", u.Scheme, rawURL)
	}
}
