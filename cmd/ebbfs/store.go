package main

import (
	"context"
	"fmt"
	"os"

	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/objstore"
)

// openStore opens the configured object store and makes the first contact
// (objstore.Reach): it says on stderr what it waits for, within 5 s, and
// gives up after [storage] connect_timeout with an error that says what to
// do. A file:// store needs no contact.
func openStore(ctx context.Context, c *config.Config) (objstore.Store, error) {
	return openStoreAt(ctx, c, c.Storage.URL, c.Storage.Endpoint, c.Storage.Region, "", "store")
}

// openStoreAt is openStore for any store of the configuration (the
// mirror's: another URL, endpoint, region and credentials profile); what
// names it in messages.
func openStoreAt(ctx context.Context, c *config.Config, url, endpoint, region, profile, what string) (objstore.Store, error) {
	s, err := objstore.OpenProfile(ctx, url, endpoint, region, profile)
	if err != nil {
		return nil, fmt.Errorf("opening %s %s: %w", what, url, err)
	}
	err = objstore.Reach(ctx, s, objstore.ReachOptions{
		Timeout:    c.Storage.ConnectTimeout.D(),
		TimeoutKey: "storage.connect_timeout",
		Notify:     func(line string) { fmt.Fprintf(os.Stderr, "ebbfs: %s\n", line) },
	})
	if err != nil {
		_ = objstore.Close(s)
		return nil, fmt.Errorf("%s %s: %w", what, url, err)
	}
	return s, nil
}
