package main

import (
	"context"
	"fmt"

	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/objstore"
)

// openStore opens the configured object store. It sends no request; the
// caller's first Get or Head is the first contact.
func openStore(ctx context.Context, c *config.Config) (objstore.Store, error) {
	s, err := objstore.Open(ctx, c.Storage.URL, c.Storage.Endpoint, c.Storage.Region)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", c.Storage.URL, err)
	}
	return s, nil
}
