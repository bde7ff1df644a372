package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Mirror is the [mirror] section: a continuous copy of the store in a
// second store (README.md, "Mirror"). The writer runs it when To is set;
// `ebbfs mirror run` runs it as a process of its own with these settings
// (its --to overrides To).
type Mirror struct {
	// To is the mirror store's URL (file:///path or s3://bucket/prefix).
	To string `toml:"to,omitempty"`
	// Endpoint and Region are the mirror store's, like [storage]'s.
	Endpoint string `toml:"endpoint,omitempty"`
	Region   string `toml:"region,omitempty"`
	// Profile names the shared AWS configuration profile whose credentials
	// reach the mirror store (another account or provider); empty means
	// the standard chain, as for [storage].
	Profile string `toml:"profile,omitempty"`
	// Bandwidth bounds the bytes copied per second (0: unbounded).
	Bandwidth Size `toml:"bandwidth,omitzero"`
	// Retention is how long a deletion waits before it reaches the mirror
	// (default 7 days): the mirror can be opened at any point within it.
	Retention Duration `toml:"retention,omitzero"`
	// PollInterval is how often the mirror asks the store for the
	// writer's next journal (default 1 s).
	PollInterval Duration `toml:"poll_interval,omitzero"`
}

// Mirror defaults.
const (
	DefaultMirrorRetention    = Duration(7 * 24 * time.Hour)
	DefaultMirrorPollInterval = Duration(time.Second)
)

func (m *Mirror) ensureDefaults() {
	if m.Retention == 0 {
		m.Retention = DefaultMirrorRetention
	}
	if m.PollInterval == 0 {
		m.PollInterval = DefaultMirrorPollInterval
	}
}

func (m *Mirror) validate(storageURL string) error {
	if m.To != "" {
		if err := validateStorageURL(m.To); err != nil {
			return fmt.Errorf("mirror.to: %w", err)
		}
		if m.To == storageURL {
			return fmt.Errorf("mirror.to %q is the filesystem's own store", m.To)
		}
	}
	if m.Endpoint != "" {
		u, err := url.Parse(m.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("mirror.endpoint %q: want an http:// or https:// URL", m.Endpoint)
		}
	}
	if strings.ContainsAny(m.Region, " \t\n/") {
		return fmt.Errorf("mirror.region %q is not a region name", m.Region)
	}
	if m.Bandwidth < 0 {
		return fmt.Errorf("mirror.bandwidth %s must not be negative", m.Bandwidth)
	}
	if r := m.Retention.D(); r < time.Minute || r > 365*24*time.Hour {
		return fmt.Errorf("mirror.retention %s is outside 1m..8760h", r)
	}
	if pi := m.PollInterval.D(); pi < 10*time.Millisecond || pi > time.Hour {
		return fmt.Errorf("mirror.poll_interval %s is outside 10ms..1h", pi)
	}
	return nil
}
