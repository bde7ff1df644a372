package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ebbfsMemoryCache is the [cache] memory_size the benchmark configures.
const ebbfsMemoryCache = 256 * MiB

// moduleRoot finds the ebbfs module's root from the working directory.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module ebbfs.dev/ebbfs\n")) {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", errors.New("not inside the ebbfs.dev/ebbfs module (run from the repository)")
		}
		d = p
	}
}

// buildEbbfs builds ./cmd/ebbfs into dir.
func buildEbbfs(dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bin", "ebbfs")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/ebbfs")
	cmd.Dir = root
	if out, err := runHelper(cmd); err != nil {
		return "", fmt.Errorf("go build ./cmd/ebbfs: %v\n%s", err, out)
	}
	return bin, nil
}

// diskSizeLine is the [cache] disk_size line for size, or a comment
// (ebbfs's default) when size is 0.
func diskSizeLine(size int64) string {
	if size <= 0 {
		return "# disk_size: ebbfs's default"
	}
	return fmt.Sprintf("disk_size = %q", formatSize(size))
}

// ebbfsLayout is the filesystem's directories under the work directory.
type ebbfsLayout struct {
	bin, config, store, cache, mnt, password, log string
}

// setupEbbfs writes a config and runs ebbfs init. storage is the
// [storage] section's body; "" means a local-directory store under dir.
// The NBD and admin TCP listeners are off, so that the run cannot collide
// with another ebbfs on the machine; the NBD and admin unix sockets are in
// the cache directory (the db group's VM case uses the NBD one). diskCache,
// if above 0, is the [cache] disk_size.
func setupEbbfs(bin, dir, storage string, diskCache int64) (*ebbfsLayout, error) {
	l := &ebbfsLayout{
		bin:      bin,
		config:   filepath.Join(dir, "ebbfs.toml"),
		store:    filepath.Join(dir, "store"),
		cache:    filepath.Join(dir, "cache"),
		mnt:      filepath.Join(dir, "mnt"),
		password: filepath.Join(dir, "password"),
		log:      filepath.Join(dir, "ebbfs.log"),
	}
	for _, d := range []string{l.store, l.cache, l.mnt} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	pw := make([]byte, 24)
	if _, err := rand.Read(pw); err != nil {
		return nil, err
	}
	if err := os.WriteFile(l.password, []byte(base64.StdEncoding.EncodeToString(pw)+"\n"), 0o600); err != nil {
		return nil, err
	}
	if storage == "" {
		storage = fmt.Sprintf("url = %q\n", "file://"+l.store)
	}
	cfg := strings.Join([]string{
		"# Written by bench/mountbench.",
		"[storage]",
		strings.TrimRight(storage, "\n"),
		"",
		"[encryption]",
		fmt.Sprintf("password_file = %q", l.password),
		"",
		"[cache]",
		fmt.Sprintf("dir = %q", l.cache),
		fmt.Sprintf("memory_size = %q", formatSize(ebbfsMemoryCache)),
		diskSizeLine(diskCache),
		"",
		"[mount]",
		fmt.Sprintf("path = %q", l.mnt),
		"",
		"[nbd]",
		"listen = []",
		fmt.Sprintf("unix_socket = %q", filepath.Join(l.cache, "nbd.sock")),
		"",
		"[admin]",
		`listen = ""`,
		"",
	}, "\n")
	if err := os.WriteFile(l.config, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if out, err := runHelper(exec.Command(bin, "init", "-c", l.config)); err != nil {
		return nil, fmt.Errorf("ebbfs init: %v\n%s", err, out)
	}
	return l, nil
}

// startEbbfs runs `ebbfs run` in the foreground as a child.
func startEbbfs(l *ebbfsLayout) (*server, error) {
	return startServer("ebbfs", l.mnt, "fuse.ebbfs", l.log, l.bin, "run", "-c", l.config)
}
