// Package config loads and checks the ebbfs TOML configuration file.
//
// Every key is documented in README.md ("Configuration reference"). Unknown
// keys are rejected by name so that a typo never silently falls back to a
// default. Relative paths (cache.dir, mount.path, encryption.password_file,
// sockets) are resolved against the directory holding the config file.
package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Defaults.
const (
	DefaultFlushInterval       = Duration(time.Second)
	DefaultReplicaPollInterval = Duration(time.Second)
	DefaultTakeoverAfter       = Duration(10 * time.Second)
	// MinTakeoverAfter is the shortest [ha] takeover_after accepted.
	MinTakeoverAfter            = Duration(2 * time.Second)
	DefaultConnectTimeout       = Duration(2 * time.Minute)
	DefaultDiskCacheSize        = Size(10 << 30)
	DefaultMemoryCacheSize      = Size(256 << 20)
	DefaultMaxConcurrentRepacks = 4
	DefaultMinDeadPercent       = 10
	DefaultNBDListen            = "127.0.0.1:10809"
	DefaultAdminListen          = "127.0.0.1:10810"
	// AdminSocketName and NBDSocketName are the default socket file names
	// inside the cache directory.
	AdminSocketName = "admin.sock"
	NBDSocketName   = "nbd.sock"
	// LogFileName is where the mount helper sends a detached writer's log.
	LogFileName = "ebbfs.log"
	// maxUnixSocketPath is sun_path's usable length on Linux.
	maxUnixSocketPath = 107
)

// Config is the whole configuration file.
type Config struct {
	Storage    Storage    `toml:"storage"`
	Encryption Encryption `toml:"encryption"`
	Cache      Cache      `toml:"cache"`
	Mount      Mount      `toml:"mount"`
	Metadata   Metadata   `toml:"metadata"`
	Filesystem Filesystem `toml:"filesystem"`
	Reclaim    Reclaim    `toml:"reclaim"`
	NBD        NBD        `toml:"nbd"`
	Admin      Admin      `toml:"admin"`
	Replica    Replica    `toml:"replica"`
	HA         HA         `toml:"ha"`
	Pricing    Pricing    `toml:"pricing"` // ebbfs space --cost (pricing.go)
	Mirror     Mirror     `toml:"mirror"`  // mirror.go

	// Path is the file the configuration was loaded from ("" if built in
	// code). It is not a TOML key.
	Path string `toml:"-"`
}

// Storage names the object store that is the filesystem's durable home.
type Storage struct {
	// URL is "file:///abs/path" (local directory) or "s3://bucket/prefix".
	URL string `toml:"url"`
	// Endpoint overrides the S3 endpoint ("http://127.0.0.1:7070"); empty
	// means AWS's own endpoint for the region.
	Endpoint string `toml:"endpoint"`
	// Region is the S3 region; empty means the AWS default chain's.
	Region string `toml:"region"`
	// ConnectTimeout is how long a command, or a run that has not yet
	// reached the store, waits for a store that does not answer before it
	// gives up (default 2m). A running writer that loses the store later
	// waits for it as long as the outage lasts.
	ConnectTimeout Duration `toml:"connect_timeout"`
}

// Encryption says where the password comes from.
type Encryption struct {
	// PasswordFile holds the password (a trailing newline is ignored). When
	// empty the password is taken from the EBBFS_PASSWORD environment
	// variable. There is deliberately no way to give it on the command line.
	PasswordFile string `toml:"password_file"`
}

// Cache is the local cache directory (Pebble metadata and frame cache).
type Cache struct {
	Dir        string `toml:"dir"`
	DiskSize   Size   `toml:"disk_size"`
	MemorySize Size   `toml:"memory_size"`
}

// Mount is the FUSE mount.
type Mount struct {
	Path string `toml:"path"`
	// AllowOther and DefaultPermissions default to true when ebbfs runs as
	// root (a shared local filesystem with kernel permission checks) and
	// to false otherwise.
	AllowOther         *bool `toml:"allow_other"`
	DefaultPermissions *bool `toml:"default_permissions"`
}

// Metadata controls the periodic durability barrier.
type Metadata struct {
	FlushInterval Duration `toml:"flush_interval"`
}

// Replica tunes a read-only replica (`ebbfs run --read-only`).
type Replica struct {
	// PollInterval is how often a replica asks the store for the writer's
	// next journal object (one GET; default 1s). After a change it asks
	// again at once.
	PollInterval Duration `toml:"poll_interval"`
}

// HA tunes standby writers (`ebbfs run --standby`).
type HA struct {
	// TakeoverAfter is how long a standby waits without a sign of life
	// from the writer (a new journal, a changed lease heartbeat) before
	// it takes over (default 10s, at least 2s). The writer heartbeats
	// every quarter of it while a standby is attached.
	TakeoverAfter Duration `toml:"takeover_after"`
	// Rejoin: a writer that finds itself fenced (another took the lease
	// while it was paused or cut off) turns into a standby following the
	// new writer (README "Standby writers"). A process started with
	// --standby does so whatever this says.
	Rejoin bool `toml:"rejoin"`
}

// Filesystem holds limits of the filesystem itself.
type Filesystem struct {
	// MaxSize, if set, is the filesystem's capacity: statfs reports it,
	// and writes and fallocate that would take the stored data past it
	// fail with ENOSPC. Unset (the default) means no quota, and statfs
	// reports a large nominal capacity (1 PiB).
	MaxSize Size `toml:"max_size,omitzero"`
}

// Reclaim tunes space reclamation.
type Reclaim struct {
	MaxConcurrentRepacks int `toml:"max_concurrent_repacks"`
	MinDeadPercent       int `toml:"min_dead_percent"`
}

// NBD is the NBD server. An empty Listen list (listen = []) and an empty
// UnixSocket ("") disable the respective listener.
type NBD struct {
	Listen     []string `toml:"listen"`
	UnixSocket *string  `toml:"unix_socket"`
	// TLSCert and TLSKey (PEM files) make every TCP listener require TLS
	// (NBD_OPT_STARTTLS); the unix socket stays plain.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// TLSClientCA (PEM), when set, makes TLS clients present a
	// certificate signed by it.
	TLSClientCA string `toml:"tls_client_ca"`
	// TLSPSKFile (GnuTLS psktool format, "identity:hexkey" lines) makes
	// every TCP listener require TLS with pre-shared keys instead of
	// certificates; it excludes tls_cert.
	TLSPSKFile string `toml:"tls_psk_file"`
	// TrustedNetwork allows a non-loopback listen address without TLS.
	TrustedNetwork bool `toml:"trusted_network"`
}

// Admin is the local control endpoint the CLI, metrics scrapers and the
// status page use.
type Admin struct {
	// Listen is a TCP host:port; "" disables TCP. Non-loopback addresses are
	// accepted only when set explicitly here (the default is loopback).
	Listen *string `toml:"listen"`
	// UnixSocket is the control socket path (default: admin.sock in the
	// cache directory).
	UnixSocket string `toml:"unix_socket"`
}

// Default returns a configuration with every default filled in except the
// storage URL and the mount path, which have none.
func Default() *Config {
	c := &Config{}
	c.EnsureDefaults()
	return c
}

// Load reads, decodes, defaults and validates the configuration file.
func Load(p string) (*Config, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", p, err)
	}
	c.Path = abs
	return c, nil
}

// Parse decodes TOML text. Relative paths resolve against baseDir (the
// config file's directory; "" leaves them as they are). The result has
// defaults filled in and is validated.
func Parse(data []byte, baseDir string) (*Config, error) {
	c := &Config{}
	md, err := toml.Decode(string(data), c)
	if err != nil {
		return nil, hintParseError(data, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		names := make([]string, len(und))
		for i, k := range und {
			names[i] = k.String()
		}
		return nil, unknownKeysError(names)
	}
	// A key that is present with a zero value is an explicit choice, not
	// "unset": reject the ones where zero means nothing sensible.
	for _, k := range [][]string{
		{"metadata", "flush_interval"},
		{"storage", "connect_timeout"},
		{"reclaim", "max_concurrent_repacks"},
		{"reclaim", "min_dead_percent"},
		{"cache", "disk_size"},
		{"cache", "memory_size"},
		{"filesystem", "max_size"},
		{"mirror", "retention"},
		{"mirror", "poll_interval"},
	} {
		if md.IsDefined(k...) && c.isZero(k[0]+"."+k[1]) {
			return nil, fmt.Errorf("%s.%s must not be zero (remove the key to use the default)", k[0], k[1])
		}
	}
	if baseDir != "" {
		c.resolve(baseDir)
	}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) isZero(key string) bool {
	switch key {
	case "metadata.flush_interval":
		return c.Metadata.FlushInterval == 0
	case "storage.connect_timeout":
		return c.Storage.ConnectTimeout == 0
	case "replica.poll_interval":
		return c.Replica.PollInterval == 0
	case "ha.takeover_after":
		return c.HA.TakeoverAfter == 0
	case "reclaim.max_concurrent_repacks":
		return c.Reclaim.MaxConcurrentRepacks == 0
	case "reclaim.min_dead_percent":
		return c.Reclaim.MinDeadPercent == 0
	case "cache.disk_size":
		return c.Cache.DiskSize == 0
	case "cache.memory_size":
		return c.Cache.MemorySize == 0
	case "filesystem.max_size":
		return c.Filesystem.MaxSize == 0
	case "mirror.retention":
		return c.Mirror.Retention == 0
	case "mirror.poll_interval":
		return c.Mirror.PollInterval == 0
	}
	return false
}

func (c *Config) resolve(base string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(base, *p)
		}
	}
	abs(&c.Cache.Dir)
	abs(&c.Mount.Path)
	abs(&c.Encryption.PasswordFile)
	abs(&c.Admin.UnixSocket)
	if c.NBD.UnixSocket != nil {
		abs(c.NBD.UnixSocket)
	}
	abs(&c.NBD.TLSCert)
	abs(&c.NBD.TLSPSKFile)
	abs(&c.NBD.TLSKey)
	abs(&c.NBD.TLSClientCA)
}

// DefaultCacheDir is the cache directory used when [cache] dir is unset:
// /var/cache/ebbfs for root, $XDG_CACHE_HOME/ebbfs (or ~/.cache/ebbfs)
// otherwise.
func DefaultCacheDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/ebbfs"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "ebbfs")
	}
	return filepath.Join(os.TempDir(), "ebbfs-cache")
}

// EnsureDefaults fills every unset field with its documented default.
func (c *Config) EnsureDefaults() {
	c.Pricing.ensureDefaults()
	c.Mirror.ensureDefaults()
	if c.Cache.Dir == "" {
		c.Cache.Dir = DefaultCacheDir()
	}
	if c.Cache.DiskSize == 0 {
		c.Cache.DiskSize = DefaultDiskCacheSize
	}
	if c.Cache.MemorySize == 0 {
		c.Cache.MemorySize = DefaultMemoryCacheSize
	}
	root := os.Geteuid() == 0
	if c.Mount.AllowOther == nil {
		c.Mount.AllowOther = &root
	}
	if c.Mount.DefaultPermissions == nil {
		v := root
		c.Mount.DefaultPermissions = &v
	}
	if c.Metadata.FlushInterval == 0 {
		c.Metadata.FlushInterval = DefaultFlushInterval
	}
	if c.Replica.PollInterval == 0 {
		c.Replica.PollInterval = DefaultReplicaPollInterval
	}
	if c.HA.TakeoverAfter == 0 {
		c.HA.TakeoverAfter = DefaultTakeoverAfter
	}
	if c.Storage.ConnectTimeout == 0 {
		c.Storage.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Reclaim.MaxConcurrentRepacks == 0 {
		c.Reclaim.MaxConcurrentRepacks = DefaultMaxConcurrentRepacks
	}
	if c.Reclaim.MinDeadPercent == 0 {
		c.Reclaim.MinDeadPercent = DefaultMinDeadPercent
	}
	if c.NBD.Listen == nil {
		c.NBD.Listen = []string{DefaultNBDListen}
	}
	if c.NBD.UnixSocket == nil {
		s := filepath.Join(c.Cache.Dir, NBDSocketName)
		c.NBD.UnixSocket = &s
	}
	if c.Admin.Listen == nil {
		s := DefaultAdminListen
		c.Admin.Listen = &s
	}
	if c.Admin.UnixSocket == "" {
		c.Admin.UnixSocket = filepath.Join(c.Cache.Dir, AdminSocketName)
	}
}

// Validate checks the configuration and returns an error naming the first
// offending key. It does not touch the filesystem or the network.
func (c *Config) Validate() error {
	if err := c.Pricing.validate(); err != nil {
		return err
	}
	if err := c.Mirror.validate(c.Storage.URL); err != nil {
		return err
	}
	if err := validateStorageURL(c.Storage.URL); err != nil {
		return fmt.Errorf("storage.url: %w", err)
	}
	if c.Storage.Endpoint != "" {
		u, err := url.Parse(c.Storage.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("storage.endpoint %q: want an http:// or https:// URL", c.Storage.Endpoint)
		}
		if !strings.HasPrefix(c.Storage.URL, "s3://") {
			return errors.New("storage.endpoint is only meaningful with an s3:// storage.url")
		}
	}
	if strings.ContainsAny(c.Storage.Region, " \t\n/") {
		return fmt.Errorf("storage.region %q is not a region name", c.Storage.Region)
	}
	if ct := c.Storage.ConnectTimeout.D(); ct < time.Second || ct > time.Hour {
		return fmt.Errorf("storage.connect_timeout %s is outside 1s..1h", ct)
	}
	if err := checkPath("cache.dir", c.Cache.Dir, false); err != nil {
		return err
	}
	if c.Cache.DiskSize < 0 {
		return errors.New("cache.disk_size must not be negative")
	}
	if c.Cache.MemorySize < 1<<20 {
		return fmt.Errorf("cache.memory_size %s is below the minimum of 1MiB", c.Cache.MemorySize)
	}
	if c.Filesystem.MaxSize < 0 || (c.Filesystem.MaxSize > 0 && c.Filesystem.MaxSize < 1<<20) {
		return fmt.Errorf("filesystem.max_size %s is below the minimum of 1MiB", c.Filesystem.MaxSize)
	}
	if c.Mount.Path != "" {
		if err := checkPath("mount.path", c.Mount.Path, false); err != nil {
			return err
		}
	}
	if c.Encryption.PasswordFile != "" {
		if err := checkPath("encryption.password_file", c.Encryption.PasswordFile, false); err != nil {
			return err
		}
	}
	if fi := c.Metadata.FlushInterval.D(); fi < 10*time.Millisecond || fi > time.Hour {
		return fmt.Errorf("metadata.flush_interval %s is outside 10ms..1h", fi)
	}
	if pi := c.Replica.PollInterval.D(); pi < 10*time.Millisecond || pi > time.Hour {
		return fmt.Errorf("replica.poll_interval %s is outside 10ms..1h", pi)
	}
	if ta := c.HA.TakeoverAfter.D(); ta < MinTakeoverAfter.D() || ta > time.Hour {
		return fmt.Errorf("ha.takeover_after %s is outside %s..1h", ta, MinTakeoverAfter.D())
	}
	if n := c.Reclaim.MaxConcurrentRepacks; n < 1 || n > 64 {
		return fmt.Errorf("reclaim.max_concurrent_repacks %d is outside 1..64", n)
	}
	if n := c.Reclaim.MinDeadPercent; n < 1 || n > 99 {
		return fmt.Errorf("reclaim.min_dead_percent %d is outside 1..99", n)
	}
	seen := map[string]bool{}
	for _, a := range c.NBD.Listen {
		if err := checkHostPort(a); err != nil {
			return fmt.Errorf("nbd.listen %q: %w", a, err)
		}
		if seen[a] {
			return fmt.Errorf("nbd.listen lists %q twice", a)
		}
		seen[a] = true
	}
	if c.NBD.UnixSocket != nil && *c.NBD.UnixSocket != "" {
		if err := checkSocket("nbd.unix_socket", *c.NBD.UnixSocket); err != nil {
			return err
		}
	}
	if err := c.NBD.validateTLS(); err != nil {
		return err
	}
	if c.Admin.Listen != nil && *c.Admin.Listen != "" {
		if err := checkHostPort(*c.Admin.Listen); err != nil {
			return fmt.Errorf("admin.listen %q: %w", *c.Admin.Listen, err)
		}
		if seen[*c.Admin.Listen] {
			return fmt.Errorf("admin.listen %q is also an nbd.listen address", *c.Admin.Listen)
		}
	}
	if err := checkSocket("admin.unix_socket", c.Admin.UnixSocket); err != nil {
		return err
	}
	if c.NBD.UnixSocket != nil && *c.NBD.UnixSocket != "" && *c.NBD.UnixSocket == c.Admin.UnixSocket {
		return errors.New("nbd.unix_socket and admin.unix_socket are the same path")
	}
	return nil
}

// ValidateForRun adds the checks only a writer or reader needs.
func (c *Config) ValidateForRun() error {
	if c.Mount.Path == "" {
		return errors.New("mount.path is not set")
	}
	return nil
}

func validateStorageURL(s string) error {
	if s == "" {
		return errors.New("not set (want file:///abs/path or s3://bucket/prefix)")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL", s)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return fmt.Errorf("%q: a file URL needs an absolute path (file:///abs/path), not a host", s)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%q: a file URL takes no query or fragment", s)
		}
		if !path.IsAbs(u.Path) || path.Clean(u.Path) == "/" {
			return fmt.Errorf("%q: the path must be absolute and not /", s)
		}
	case "s3":
		if u.Host == "" {
			return fmt.Errorf("%q: missing bucket (s3://bucket/prefix)", s)
		}
		if u.User != nil || u.Port() != "" {
			return fmt.Errorf("%q: s3 URLs are s3://bucket/prefix; put credentials in the AWS chain and the address in storage.endpoint", s)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%q: an s3 URL takes no query or fragment", s)
		}
		for _, part := range strings.Split(strings.Trim(u.Path, "/"), "/") {
			if part == "." || part == ".." {
				return fmt.Errorf("%q: the prefix must not contain \".\" or \"..\" components", s)
			}
		}
	default:
		return fmt.Errorf("%q: unsupported scheme %q (want file or s3)", s, u.Scheme)
	}
	return nil
}

// StoreDir returns the directory of a file:// storage URL, or "" for other
// schemes.
func (c *Config) StoreDir() string {
	u, err := url.Parse(c.Storage.URL)
	if err != nil || u.Scheme != "file" {
		return ""
	}
	return path.Clean(u.Path)
}

func checkPath(key, p string, _ bool) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%s %q must be an absolute path (or relative to the config file)", key, p)
	}
	if strings.ContainsRune(p, 0) {
		return fmt.Errorf("%s contains a NUL byte", key)
	}
	return nil
}

func checkSocket(key, p string) error {
	if err := checkPath(key, p, false); err != nil {
		return err
	}
	if len(p) > maxUnixSocketPath {
		return fmt.Errorf("%s %q is longer than %d bytes, the limit for unix socket paths", key, p, maxUnixSocketPath)
	}
	return nil
}

func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return errors.New("want host:port")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number in 0..65535", port)
	}
	if host == "" {
		return errors.New("empty host would listen on every interface; write 0.0.0.0 or [::] if that is meant")
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("host %q is not a host name or address", host)
	}
	return nil
}

// IsLoopback reports whether a host:port names a loopback address.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// AdminListen returns the admin TCP address ("" when disabled).
func (c *Config) AdminListen() string {
	if c.Admin.Listen == nil {
		return ""
	}
	return *c.Admin.Listen
}

// NBDUnixSocket returns the NBD unix socket path ("" when disabled).
func (c *Config) NBDUnixSocket() string {
	if c.NBD.UnixSocket == nil {
		return ""
	}
	return *c.NBD.UnixSocket
}

// LogFile is the log of a writer started by the mount helper.
func (c *Config) LogFile() string { return filepath.Join(c.Cache.Dir, LogFileName) }

// Encode writes the configuration (with every default filled in) as TOML
// that Parse reads back to the same values.
func (c *Config) Encode(w io.Writer) error {
	enc := toml.NewEncoder(w)
	enc.Indent = ""
	return enc.Encode(c)
}
