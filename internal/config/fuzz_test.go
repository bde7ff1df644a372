package config

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary text to the parser: it must return a config or
// an error, never panic, and any config it accepts must validate again and
// carry every default.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(full))
	f.Add([]byte("[storage]\nurl = \"file:///srv/ebbfs\"\n"))
	f.Add([]byte("[storage]\nurl = \"s3://b/p\"\n[cache]\ndisk_size = 12\nmemory_size = \"1.5GiB\"\n"))
	f.Add([]byte("[nbd]\nlisten = []\nunix_socket = \"\"\n[admin]\nlisten = \"\"\n"))
	f.Add([]byte("[metadata]\nflush_interval = \"-1s\"\n"))
	f.Add([]byte("a = [[[\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "/base")
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		if c.Mount.AllowOther == nil || c.Mount.DefaultPermissions == nil || c.NBD.UnixSocket == nil || c.Admin.Listen == nil {
			t.Fatal("accepted config lacks defaults")
		}
		if c.Metadata.FlushInterval <= 0 || c.Cache.Dir == "" || c.Admin.UnixSocket == "" {
			t.Fatal("accepted config has zero defaults")
		}
		var b strings.Builder
		if err := c.Encode(&b); err != nil {
			t.Fatalf("Encode: %v", err)
		}
		back, err := Parse([]byte(b.String()), "/other")
		if err != nil {
			t.Fatalf("encoded config does not parse: %v\n%s", err, b.String())
		}
		if !reflect.DeepEqual(c, back) {
			t.Fatalf("round trip changed the config\n%s", b.String())
		}
	})
}
