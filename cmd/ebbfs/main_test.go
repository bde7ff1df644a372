package main

import (
	"errors"
	"testing"

	"ebbfs.dev/ebbfs/internal/mounthelper"
)

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
	if c := exitCode(&mounthelper.UsageError{Err: errors.New("x")}); c != exitUsage {
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
