package main

import (
	"errors"
	"reflect"
	"testing"
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

func TestExitCodes(t *testing.T) {
	if c := exitCode(nil); c != 0 {
		t.Errorf("nil -> %d", c)
	}
	if c := exitCode(errors.New("x")); c != exitFailure {
		t.Errorf("plain -> %d", c)
	}
	if c := exitCode(&usageError{errors.New("x")}); c != exitUsage {
		t.Errorf("usage -> %d", c)
	}
	if c := exitCode(&exitError{exitWrongPass, errors.New("x")}); c != exitWrongPass {
		t.Errorf("wrong password -> %d", c)
	}
	if c := run([]string{"ebbfs", "frobnicate"}); c == 0 {
		t.Error("unknown command exited 0")
	}
	if c := run([]string{"ebbfs", "version"}); c != 0 {
		t.Errorf("version exited %d", c)
	}
	if c := run([]string{"/sbin/mount.fuse.ebbfs"}); c != exitUsage {
		t.Errorf("helper without arguments exited %d, want %d", c, exitUsage)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 20: "3.0 MiB", 5<<40 + 1<<39: "5.5 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
