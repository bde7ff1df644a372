package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"ExpireTime": "expire_time", "BytesUp": "bytes_up", "FSUUID": "fsuuid", "fs_uuid": "fs_uuid",
		"MetaGC": "meta_gc", "LastBarrier": "last_barrier", "ID": "id", "HTTPServer": "http_server",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrintJSONStyle(t *testing.T) {
	type inner struct{ DeletedBytes int64 }
	type reply struct {
		inner
		Name      string
		Took      time.Duration
		When      time.Time
		Never     time.Time
		Tagged    string `json:"tagged_name"`
		Omitted   string `json:",omitempty"`
		Ptr       *inner
		ByName    map[string]int64
		Uptime    time.Duration `json:"uptime_seconds"`
		unexposed int
	}
	var b bytes.Buffer
	err := printJSON(&b, reply{inner: inner{7}, Name: "x", Took: 1500 * time.Millisecond, When: time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC),
		Tagged: "t", ByName: map[string]int64{"CamelName": 1}, Uptime: 2 * time.Second, unexposed: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{`"deleted_bytes": 7`, `"name": "x"`, `"took_seconds": 1.5`, `"when": "2026-12-07T06:00:00Z"`,
		`"tagged_name": "t"`, `"CamelName": 1`, `"uptime_seconds": 2`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	for _, bad := range []string{"never", "0001-01-01", "omitted", "ptr", "unexposed", "Took"} {
		if strings.Contains(out, bad) {
			t.Errorf("output has %q:\n%s", bad, out)
		}
	}
}
