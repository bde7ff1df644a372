package mounthelper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/mountinfo"
)

func TestParseHelperArgs(t *testing.T) {
	cases := []struct {
		args    []string
		want    helperArgs
		wantErr bool
	}{
		{args: []string{"/etc/ebbfs/ebbfs.toml", "/mnt/ebbfs", "-o", "rw,_netdev"},
			want: helperArgs{config: "/etc/ebbfs/ebbfs.toml", mountpoint: "/mnt/ebbfs", rwGiven: true, ignored: []string{"_netdev"}}},
		{args: []string{"c.toml", "/m", "-o", "defaults,ro", "-n", "-s"},
			want: helperArgs{config: "c.toml", mountpoint: "/m", readOnly: true, rwGiven: true, ignored: []string{"defaults"}}},
		{args: []string{"-oro,nofail", "c", "m", "-v", "-t", "fuse.ebbfs"},
			want: helperArgs{config: "c", mountpoint: "m", readOnly: true, rwGiven: true, verbose: true, ignored: []string{"nofail"}}},
		{args: []string{"c", "m", "-f"}, want: helperArgs{config: "c", mountpoint: "m", fake: true}},
		{args: []string{"c", "m", "-o", "ro", "-o", "rw"}, want: helperArgs{config: "c", mountpoint: "m", rwGiven: true}},
		{args: []string{"/etc/e.toml", "/m", "-o", "remount,noatime"},
			want: helperArgs{config: "/etc/e.toml", mountpoint: "/m", remount: true, ignored: []string{"noatime"}}},
		{args: []string{"c"}, wantErr: true},
		{args: []string{"c", "m", "extra"}, wantErr: true},
		{args: []string{"c", "m", "-o"}, wantErr: true},
		{args: []string{"c", "m", "--bogus"}, wantErr: true},
		{args: []string{"c", "m", "-N", "/proc/1/ns/mnt"}, wantErr: true},
		{args: nil, wantErr: true},
	}
	for _, tc := range cases {
		got, err := parseHelperArgs(tc.args)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%q: parsed as %+v, want an error", tc.args, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%q: got %+v, want %+v", tc.args, *got, tc.want)
		}
	}
}

func TestSameMount(t *testing.T) {
	m := mountinfo.Entry{Mountpoint: "/m", FSType: "fuse.ebbfs", Source: "/etc/e.toml", Options: "rw,nosuid,nodev,relatime", Super: "rw,user_id=0,allow_other"}
	ro := m
	ro.Options = "ro,nosuid,nodev,relatime"
	for _, tc := range []struct {
		name string
		args []string
		m    mountinfo.Entry
		want string // "" for success, else a part of the error
	}{
		{"same options", []string{"/etc/e.toml", "/m", "-o", "remount,rw,nosuid,_netdev,x-systemd.automount"}, m, ""},
		{"source given as the fs name", []string{"ebbfs", "/m", "-o", "remount"}, m, ""},
		{"read-only stays read-only", []string{"/etc/e.toml", "/m", "-o", "remount,ro"}, ro, ""},
		{"rw to ro", []string{"/etc/e.toml", "/m", "-o", "remount,ro"}, m, "from read-write to read-only"},
		{"ro to rw", []string{"/etc/e.toml", "/m", "-o", "remount,rw"}, ro, "from read-only to read-write"},
		{"another config", []string{"/etc/other.toml", "/m", "-o", "remount"}, m, "not /etc/other.toml"},
		{"a new option", []string{"/etc/e.toml", "/m", "-o", "remount,noexec"}, m, `option "noexec"`},
	} {
		h, err := parseHelperArgs(tc.args)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = sameMount(h, "/m", tc.m)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

func TestLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	old := "an earlier run\n"
	var b strings.Builder
	for i := 0; b.Len() < 10000; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(p, []byte(old+b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	tail := logTail(p, int64(len(old)))
	if len(tail) > 4096 || strings.Contains(tail, "earlier") || !strings.HasSuffix(tail, strings.TrimSuffix(b.String()[b.Len()-20:], "\n")) {
		t.Errorf("tail of %d bytes starts %q, ends %q", len(tail), tail[:20], tail[len(tail)-20:])
	}
	if !strings.HasPrefix(tail, "line ") {
		t.Errorf("the tail starts mid-line: %q", tail[:20])
	}
	if got := logTail(p, 1<<30); got != "(log unavailable)" {
		t.Errorf("an offset past the end: %q", got)
	}
}

func TestRunFakeChecksArguments(t *testing.T) {
	var ue *UsageError
	if err := Run([]string{"only-one"}); !errors.As(err, &ue) {
		t.Errorf("one argument: %v, want a usage error", err)
	}
	if err := Run([]string{"c", "m", "-o", "remount", "-f"}); err != nil {
		t.Errorf("a fake remount: %v", err)
	}
	if err := Run([]string{filepath.Join(t.TempDir(), "missing.toml"), t.TempDir()}); err == nil || errors.As(err, &ue) {
		t.Errorf("a missing config: %v, want a plain error", err)
	}
}

func TestExitedReapsTheChild(t *testing.T) {
	cmd := exec.Command("sh", "-c", "read x; exit 3")
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if s, ok := exited(cmd.Process.Pid); ok {
		t.Fatalf("a child still running counts as exited: %s", s)
	}
	w.Close() // the child reads EOF and exits 3
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, ok := exited(cmd.Process.Pid)
		if ok {
			if s != "exit status 3" {
				t.Errorf("exited: %q, want exit status 3", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child's exit was not seen")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
