package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const full = `
[storage]
url = "s3://bucket/some/prefix"
endpoint = "http://127.0.0.1:7070"
region = "eu-west-1"

[encryption]
password_file = "secret/pw"

[cache]
dir = "/var/cache/ebbfs-test"
disk_size = "10GiB"
memory_size = "512MiB"

[mount]
path = "/mnt/ebbfs"
allow_other = false
default_permissions = true

[metadata]
flush_interval = "250ms"

[filesystem]
max_size = "2TiB"

[reclaim]
max_concurrent_repacks = 8
min_dead_percent = 25

[nbd]
listen = ["127.0.0.1:20809", "[::1]:20809"]
unix_socket = "/run/ebbfs/nbd.sock"

[admin]
listen = "127.0.0.1:20810"
unix_socket = "/run/ebbfs/admin.sock"
`

func TestParseFull(t *testing.T) {
	c, err := Parse([]byte(full), "/etc/ebbfs")
	if err != nil {
		t.Fatal(err)
	}
	if c.Storage.URL != "s3://bucket/some/prefix" || c.Storage.Endpoint != "http://127.0.0.1:7070" || c.Storage.Region != "eu-west-1" {
		t.Errorf("storage = %+v", c.Storage)
	}
	if c.Encryption.PasswordFile != "/etc/ebbfs/secret/pw" {
		t.Errorf("password_file = %q, want it resolved against the config dir", c.Encryption.PasswordFile)
	}
	if c.Cache.DiskSize != 10<<30 || c.Cache.MemorySize != 512<<20 {
		t.Errorf("cache sizes = %d, %d", c.Cache.DiskSize, c.Cache.MemorySize)
	}
	if *c.Mount.AllowOther || !*c.Mount.DefaultPermissions {
		t.Errorf("mount booleans = %v %v", *c.Mount.AllowOther, *c.Mount.DefaultPermissions)
	}
	if c.Metadata.FlushInterval.D() != 250*time.Millisecond {
		t.Errorf("flush_interval = %s", c.Metadata.FlushInterval)
	}
	if c.Filesystem.MaxSize != 2<<40 {
		t.Errorf("filesystem.max_size = %d", c.Filesystem.MaxSize)
	}
	if c.Reclaim.MaxConcurrentRepacks != 8 || c.Reclaim.MinDeadPercent != 25 {
		t.Errorf("reclaim = %+v", c.Reclaim)
	}
	if len(c.NBD.Listen) != 2 || c.NBDUnixSocket() != "/run/ebbfs/nbd.sock" {
		t.Errorf("nbd = %+v", c.NBD)
	}
	if c.AdminListen() != "127.0.0.1:20810" || c.Admin.UnixSocket != "/run/ebbfs/admin.sock" {
		t.Errorf("admin = %+v", c.Admin)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte("[storage]\nurl = \"file:///srv/ebbfs\"\n[cache]\ndir = \"/tmp/c\"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	root := os.Geteuid() == 0
	if *c.Mount.AllowOther != root || *c.Mount.DefaultPermissions != root {
		t.Errorf("allow_other/default_permissions = %v/%v, want %v as euid %d", *c.Mount.AllowOther, *c.Mount.DefaultPermissions, root, os.Geteuid())
	}
	if c.Metadata.FlushInterval.D() != time.Second {
		t.Errorf("flush_interval default = %s", c.Metadata.FlushInterval)
	}
	if c.Reclaim.MaxConcurrentRepacks != 4 || c.Reclaim.MinDeadPercent != 10 {
		t.Errorf("reclaim defaults = %+v", c.Reclaim)
	}
	if len(c.NBD.Listen) != 1 || c.NBD.Listen[0] != "127.0.0.1:10809" {
		t.Errorf("nbd.listen default = %v", c.NBD.Listen)
	}
	if c.NBDUnixSocket() != "/tmp/c/nbd.sock" || c.Admin.UnixSocket != "/tmp/c/admin.sock" {
		t.Errorf("sockets = %q %q, want inside the cache dir", c.NBDUnixSocket(), c.Admin.UnixSocket)
	}
	if !IsLoopback(c.AdminListen()) {
		t.Errorf("admin.listen default %q is not loopback", c.AdminListen())
	}
	if c.Cache.DiskSize != 10<<30 || c.Cache.MemorySize != 256<<20 {
		t.Errorf("cache defaults = %d %d", c.Cache.DiskSize, c.Cache.MemorySize)
	}
	if c.StoreDir() != "/srv/ebbfs" {
		t.Errorf("StoreDir = %q", c.StoreDir())
	}
	if err := c.ValidateForRun(); err == nil || !strings.Contains(err.Error(), "mount.path") {
		t.Errorf("ValidateForRun without mount.path = %v", err)
	}
}

func TestDisableListeners(t *testing.T) {
	c, err := Parse([]byte("[storage]\nurl = \"file:///srv/x\"\n[nbd]\nlisten = []\nunix_socket = \"\"\n[admin]\nlisten = \"\"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.NBD.Listen) != 0 || c.NBDUnixSocket() != "" || c.AdminListen() != "" {
		t.Errorf("listeners not disabled: %+v %q %q", c.NBD.Listen, c.NBDUnixSocket(), c.AdminListen())
	}
	if c.Admin.UnixSocket == "" {
		t.Error("admin unix socket must always exist")
	}
}

func TestErrors(t *testing.T) {
	base := "[storage]\nurl = \"file:///srv/ebbfs\"\n"
	cases := []struct {
		name, toml, want string
	}{
		{"unknown key", base + "[cache]\ndirr = \"/x\"\n", `unknown key "cache.dirr"`},
		{"unknown keys", base + "bogus = 1\n[mount]\nallow_others = true\n", `"storage.bogus", "mount.allow_others" (did you mean "mount.allow_other"?)`},
		{"did you mean", base + "[cache]\ndisksize = \"1GiB\"\n", `unknown key "cache.disksize" (did you mean "cache.disk_size"?)`},
		{"other section", base + "[cache]\nmax_size = \"1GiB\"\n", `(did you mean "filesystem.max_size"?)`},
		{"unquoted size", base + "[filesystem]\nmax_size = 64MiB\n", `line 4: max_size = 64MiB: sizes and durations are strings; write them in quotes: max_size = "64MiB"`},
		{"unquoted duration", base + "[metadata]\nflush_interval = 1s # often\n", `flush_interval = "1s"`},
		{"zero connect timeout", base + "connect_timeout = \"0s\"\n", "storage.connect_timeout must not be zero"},
		{"short connect timeout", base + "connect_timeout = \"10ms\"\n", "storage.connect_timeout 10ms is outside 1s..1h"},
		{"unknown section", base + "[frobnicate]\nx = 1\n", `frobnicate.x`},
		{"missing url", "[cache]\ndir = \"/x\"\n", "storage.url: not set"},
		{"bad scheme", "[storage]\nurl = \"http://x/y\"\n", "unsupported scheme"},
		{"relative file url", "[storage]\nurl = \"file://rel/path\"\n", "absolute path"},
		{"root file url", "[storage]\nurl = \"file:///\"\n", "absolute and not /"},
		{"s3 no bucket", "[storage]\nurl = \"s3:///prefix\"\n", "missing bucket"},
		{"s3 dotdot", "[storage]\nurl = \"s3://b/a/../c\"\n", "must not contain"},
		{"endpoint on file", base + "endpoint = \"http://x:1\"\n", "only meaningful"},
		{"bad endpoint", "[storage]\nurl = \"s3://b\"\nendpoint = \"x:1\"\n", "storage.endpoint"},
		{"bad size", base + "[cache]\ndisk_size = \"ten gigs\"\n", "ten gigs"},
		{"negative size", base + "[cache]\ndisk_size = -5\n", "negative"},
		{"zero size", base + "[cache]\ndisk_size = 0\n", "cache.disk_size must not be zero"},
		{"zero max_size", base + "[filesystem]\nmax_size = 0\n", "filesystem.max_size must not be zero"},
		{"tiny max_size", base + "[filesystem]\nmax_size = \"4KiB\"\n", "filesystem.max_size"},
		{"tiny memory", base + "[cache]\nmemory_size = \"4KiB\"\n", "cache.memory_size"},
		{"bad duration", base + "[metadata]\nflush_interval = \"soon\"\n", "soon"},
		{"int duration", base + "[metadata]\nflush_interval = 5\n", "duration must be a string"},
		{"zero duration", base + "[metadata]\nflush_interval = \"0s\"\n", "flush_interval must not be zero"},
		{"short duration", base + "[metadata]\nflush_interval = \"1ms\"\n", "outside 10ms..1h"},
		{"repacks range", base + "[reclaim]\nmax_concurrent_repacks = 1000\n", "max_concurrent_repacks 1000"},
		{"repacks zero", base + "[reclaim]\nmax_concurrent_repacks = 0\n", "max_concurrent_repacks must not be zero"},
		{"dead percent", base + "[reclaim]\nmin_dead_percent = 100\n", "min_dead_percent 100"},
		{"nbd listen", base + "[nbd]\nlisten = [\"nocolon\"]\n", "nbd.listen \"nocolon\""},
		{"nbd listen empty host", base + "[nbd]\nlisten = [\":10809\"]\n", "every interface"},
		{"nbd dup", base + "[nbd]\nlisten = [\"127.0.0.1:1\", \"127.0.0.1:1\"]\n", "twice"},
		{"nbd public without tls", base + "[nbd]\nlisten = [\"127.0.0.1:1\", \"0.0.0.0:10809\"]\n", "not loopback"},
		{"nbd hostname without tls", base + "[nbd]\nlisten = [\"nas.example:10809\"]\n", "not loopback"},
		{"nbd cert without key", base + "[nbd]\ntls_cert = \"/c.pem\"\n", "go together"},
		{"nbd client ca without cert", base + "[nbd]\ntls_client_ca = \"/ca.pem\"\n", "tls_client_ca needs"},
		{"nbd psk beside cert", base + "[nbd]\ntls_psk_file = \"/k.psk\"\ntls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n", "exclude each other"},
		{"admin port", base + "[admin]\nlisten = \"127.0.0.1:99999\"\n", "0..65535"},
		{"admin = nbd", base + "[nbd]\nlisten = [\"127.0.0.1:5\"]\n[admin]\nlisten = \"127.0.0.1:5\"\n", "also an nbd.listen"},
		{"long socket", base + "[admin]\nunix_socket = \"/" + strings.Repeat("s", 200) + "\"\n", "longer than"},
		{"same sockets", base + "[admin]\nunix_socket = \"/x.sock\"\n[nbd]\nunix_socket = \"/x.sock\"\n", "same path"},
		{"wrong type", base + "[mount]\nallow_other = \"yes\"\n", "allow_other"},
		{"syntax", "[storage\nurl=", "expected"},
		{"relative without base", base + "[cache]\ndir = \"rel\"\n", "cache.dir \"rel\" must be an absolute path"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.toml), "")
			if err == nil {
				t.Fatalf("Parse succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ebbfs.toml")
	if err := os.WriteFile(p, []byte("[storage]\nurl = \"file:///srv/x\"\n[cache]\ndir = \"cache\"\n[mount]\npath = \"mnt\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cache.Dir != filepath.Join(dir, "cache") || c.Mount.Path != filepath.Join(dir, "mnt") {
		t.Errorf("relative paths not resolved against %s: %q %q", dir, c.Cache.Dir, c.Mount.Path)
	}
	if c.Path != p {
		t.Errorf("Path = %q", c.Path)
	}
	if _, err := Load(filepath.Join(dir, "missing.toml")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
	if err := os.WriteFile(p, []byte("[storage]\nurl = \"file:///srv/x\"\ntypo = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "storage.typo") {
		t.Errorf("Load error = %v, want the file and key named", err)
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]Size{
		"0": 0, "4096": 4096, "512KiB": 512 << 10, "256MiB": 256 << 20, "10GiB": 10 << 30,
		"1TiB": 1 << 40, "1kb": 1000, "2MB": 2e6, "3 GB": 3e9, "1.5GiB": 3 << 29, "64k": 64 << 10,
		"100B": 100, " 7MiB ": 7 << 20, "1e3": 1000,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "-1KiB", "1XiB", "abc", "1.2.3", "NaN", "inf", "0x10", "99999999999PiB", "1e30"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want error", in, got)
		}
	}
	for _, s := range []Size{0, 1, 1023, 1 << 10, 3 << 20, 10 << 30, 5 << 40} {
		back, err := ParseSize(s.String())
		if err != nil || back != s {
			t.Errorf("round trip %d -> %q -> %d, %v", s, s.String(), back, err)
		}
	}
}

func TestPassword(t *testing.T) {
	dir := t.TempDir()
	pf := filepath.Join(dir, "pw")
	c := &Config{Encryption: Encryption{PasswordFile: pf}}
	for in, want := range map[string]string{
		"correct horse\n":   "correct horse",
		"crlf password\r\n": "crlf password",
		"no newline":        "no newline",
		" spaces kept \n":   " spaces kept ",
	} {
		if err := os.WriteFile(pf, []byte(in), 0o600); err != nil {
			t.Fatal(err)
		}
		got, src, err := c.Password()
		if err != nil || got != want || !strings.Contains(src, pf) {
			t.Errorf("Password(%q) = %q, %q, %v; want %q", in, got, src, err, want)
		}
	}
	for _, bad := range []string{"", "\n", "two\nlines\n"} {
		if err := os.WriteFile(pf, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, _, err := c.Password(); err == nil {
			t.Errorf("Password(%q) = %q, want error", bad, got)
		}
	}
	c.Encryption.PasswordFile = filepath.Join(dir, "missing")
	if _, _, err := c.Password(); err == nil {
		t.Error("missing password file accepted")
	}

	c.Encryption.PasswordFile = ""
	t.Setenv(PasswordEnv, "from the environment")
	if got, src, err := c.Password(); err != nil || got != "from the environment" || src != PasswordEnv {
		t.Errorf("env password = %q %q %v", got, src, err)
	}
	t.Setenv(PasswordEnv, "")
	if _, _, err := c.Password(); err == nil || !strings.Contains(err.Error(), PasswordEnv) || !strings.Contains(err.Error(), "password_file") {
		t.Errorf("no password error = %v, want both sources named", err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, in := range []string{full, "[storage]\nurl = \"file:///srv/x\"\n", "[storage]\nurl = \"file:///srv/x\"\n[nbd]\nlisten = []\nunix_socket = \"\"\n[admin]\nlisten = \"\"\n"} {
		c, err := Parse([]byte(in), "/etc/ebbfs")
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := c.Encode(&b); err != nil {
			t.Fatal(err)
		}
		back, err := Parse([]byte(b.String()), "/elsewhere")
		if err != nil {
			t.Fatalf("encoded config does not parse: %v\n%s", err, b.String())
		}
		if !reflect.DeepEqual(c, back) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v\n%s", c, back, b.String())
		}
	}
}

func TestNBDNonLoopback(t *testing.T) {
	base := "[storage]\nurl = \"file:///srv/x\"\n"
	for _, extra := range []string{
		"trusted_network = true\n",
		"tls_cert = \"tls/cert.pem\"\ntls_key = \"tls/key.pem\"\ntls_client_ca = \"tls/ca.pem\"\n",
		"tls_psk_file = \"tls/keys.psk\"\n",
	} {
		c, err := Parse([]byte(base+"[nbd]\nlisten = [\"0.0.0.0:10809\"]\n"+extra), "/etc/ebbfs")
		if err != nil {
			t.Fatalf("%q: %v", extra, err)
		}
		psk := c.NBD.TLSPSKFile != ""
		if c.NBD.TLS() != (c.NBD.TLSCert != "" || psk) || (c.NBD.TLSCert != "" && c.NBD.TLSClientCA != "/etc/ebbfs/tls/ca.pem") ||
			(psk && c.NBD.TLSPSKFile != "/etc/ebbfs/tls/keys.psk") {
			t.Errorf("%q: %+v", extra, c.NBD)
		}
	}
}
