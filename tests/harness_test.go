// Package tests holds the end-to-end tests: the real ebbfs binary, real
// FUSE mounts, a real S3 server and real NBD clients.
//
// They need root, /dev/fuse and fusermount3 (scripts/install-deps.sh
// installs what is missing). Outside CI a missing prerequisite skips the
// tests with the reason; with CI=true it fails them.
package tests

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/gnutls"
	"ebbfs.dev/ebbfs/internal/mountinfo"
	"ebbfs.dev/ebbfs/internal/testport"
	"ebbfs.dev/ebbfs/internal/testutil"
)

var (
	binDir   string // holds ebbfs and the mount.fuse.ebbfs symlink
	ebbfsBin string
	noRun    string // why the tests cannot run here ("" when they can)
)

const (
	// mountTimeout and exitTimeout only catch a hang too: on a machine
	// at load 50 a writer once printed nothing for a minute after its
	// start, and a reclamation cycle that does nothing took 55 s.
	mountTimeout = 3 * time.Minute
	exitTimeout  = 3 * time.Minute
	// cmdTimeout only catches a hung command: a loaded CI machine can
	// make a healthy fsck --verify-data take minutes.
	cmdTimeout   = 5 * time.Minute
	testPassword = "e2e password, long enough"
)

func inCI() bool { return os.Getenv("CI") == "true" }

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if p := flag.Lookup("test.parallel"); !explicit && p != nil && p.Value.String() != "" && atoi(p.Value.String()) < 3 {
		// The outage test runs its three variants at once: they spend
		// their minute waiting for the store, not on the CPU.
		_ = flag.Set("test.parallel", "3")
	}
	noRun = prerequisites()
	if noRun != "" && inCI() {
		fmt.Fprintf(os.Stderr, "tests: cannot run the end-to-end tests: %s (run scripts/install-deps.sh as root)\n", noRun)
		return 1
	}
	if noRun == "" {
		dir, err := os.MkdirTemp("", "ebbfs-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		ebbfsBin = filepath.Join(dir, "ebbfs")
		// The test clock (EBBFS_TEST_TIME_SCALE) exists only in this
		// build; TLS-PSK when this test binary has it too.
		tags := "ebbfs_testclock"
		if gnutls.Available {
			tags += ",ebbfs_gnutls"
		}
		args := []string{"build", "-tags", tags, "-o", ebbfsBin}
		if os.Getenv("EBBFS_E2E_RACE") != "" {
			args = append(args, "-race") // the binary under the race detector
		}
		cmd := exec.Command("go", append(args, "ebbfs.dev/ebbfs/cmd/ebbfs")...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "tests: building ebbfs: %v\n", err)
			return 1
		}
		if err := os.Symlink("ebbfs", filepath.Join(dir, "mount.fuse.ebbfs")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func prerequisites() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "/dev/fuse is missing"
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		return "fusermount3 is not installed (package fuse3)"
	}
	return ""
}

// need skips (or, in CI, fails) a test whose tool is missing.
func need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if inCI() {
				t.Fatalf("%s is not installed; scripts/install-deps.sh installs it", tool)
			}
			t.Skipf("%s is not installed; scripts/install-deps.sh installs it", tool)
		}
	}
}

// env is one filesystem: a config, a store, a cache and a mountpoint.
type env struct {
	t        testing.TB
	dir      string
	cfg      string
	store    string // local store directory ("" for S3)
	cache    string
	mnt      string
	nbdAddr  string
	admin    string
	extraEnv []string
	storage  string // the [storage] section

	procsMu sync.Mutex
	procs   []*proc // every "ebbfs run" started, for dumpStacks
}

type envOption func(*env)

// withS3 points the store at an S3 server.
func withS3(endpoint, region, bucket, prefix, access, secret string) envOption {
	return func(e *env) {
		e.store = ""
		e.storage = fmt.Sprintf("url = %q\nendpoint = %q\nregion = %q\n", "s3://"+bucket+"/"+prefix, endpoint, region)
		e.extraEnv = append(e.extraEnv, "AWS_ACCESS_KEY_ID="+access, "AWS_SECRET_ACCESS_KEY="+secret, "AWS_EC2_METADATA_DISABLED=true")
	}
}

// withEnvVars adds environment variables for every ebbfs process.
func withEnvVars(kv ...string) envOption {
	return func(e *env) { e.extraEnv = append(e.extraEnv, kv...) }
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	// Short paths: unix sockets live in the cache directory.
	dir, err := os.MkdirTemp("", "ebbfs-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("EBBFS_E2E_KEEP") != "" {
			t.Logf("kept %s", dir)
			return
		}
		if isMounted(filepath.Join(dir, "mnt")) {
			t.Errorf("%s is still mounted at cleanup; leaving %s in place", filepath.Join(dir, "mnt"), dir)
			return
		}
		os.RemoveAll(dir)
	})
	e := &env{
		t:       t,
		dir:     dir,
		cfg:     filepath.Join(dir, "ebbfs.toml"),
		store:   filepath.Join(dir, "store"),
		cache:   filepath.Join(dir, "cache"),
		mnt:     filepath.Join(dir, "mnt"),
		nbdAddr: freeAddr(t),
		admin:   freeAddr(t),
	}
	e.storage = fmt.Sprintf("url = %q\n", "file://"+e.store)
	for _, o := range opts {
		o(e)
	}
	if err := os.WriteFile(filepath.Join(dir, "password"), []byte(testPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if e.store != "" { // init refuses a store directory that does not exist
		if err := os.Mkdir(e.store, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	e.writeConfig("")
	return e
}

// sameStore returns a second environment (own cache directory, mountpoint
// and ports) on e's store: a reader, or a writer that must be refused.
func (e *env) sameStore() *env {
	e.t.Helper()
	r := newEnv(e.t)
	r.storage = e.storage
	r.extraEnv = append([]string(nil), e.extraEnv...) // store credentials, test knobs
	r.writeConfig("")
	return r
}

// writeConfig writes the config file; extra is appended verbatim.
func (e *env) writeConfig(extra string) {
	e.t.Helper()
	cfg := fmt.Sprintf(`[storage]
%s
[encryption]
password_file = "password"

[cache]
dir = %q
memory_size = "64MiB"
disk_size = "1GiB"

[mount]
path = %q

[metadata]
flush_interval = "200ms"

[nbd]
listen = [%q]

[admin]
listen = %q
%s`, e.storage, e.cache, e.mnt, e.nbdAddr, e.admin, extra)
	if err := os.WriteFile(e.cfg, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// freeAddr returns a loopback address no other test (in this binary or
// another running beside it) has been given, free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	port, err := testport.Free("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// result is a finished command.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

func (e *env) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), e.extraEnv...)
	cmd.Env = append(cmd.Env, "EBBFS_PASSWORD=", "EBBFS_LOG_LEVEL=debug")
	cmd.Dir = e.dir
	return cmd
}

// run runs a command to completion.
func (e *env) run(name string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := e.command(ctx, name, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		e.t.Fatalf("%s %v: %v", name, args, err)
	}
	if ctx.Err() != nil {
		e.dumpStacks()
		e.t.Fatalf("%s %v timed out after %s\n%s", name, args, cmdTimeout, r)
	}
	return r
}

// dumpStacks has every "ebbfs run" of this env that is still running
// print its goroutines (SIGQUIT) and exit, so that the test's log shows
// where a command that hung was waiting.
func (e *env) dumpStacks() {
	e.procsMu.Lock()
	procs := append([]*proc(nil), e.procs...)
	e.procsMu.Unlock()
	for _, p := range procs {
		if p.exited() {
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused process cannot dump
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(exitTimeout):
		}
	}
}

// ebbfs runs an ebbfs subcommand with this env's config.
func (e *env) ebbfs(sub string, args ...string) result {
	e.t.Helper()
	return e.run(ebbfsBin, append([]string{sub, "-c", e.cfg}, args...)...)
}

// mustEbbfs runs a subcommand that must succeed.
func (e *env) mustEbbfs(sub string, args ...string) result {
	e.t.Helper()
	r := e.ebbfs(sub, args...)
	if r.code != 0 {
		e.t.Fatalf("ebbfs %s failed: %s", sub, r)
	}
	return r
}

func (e *env) init() {
	e.t.Helper()
	r := e.mustEbbfs("init")
	if !strings.Contains(r.stdout, "initialized") {
		e.t.Fatalf("ebbfs init printed %q", r.stdout)
	}
}

// proc is a running "ebbfs run".
type proc struct {
	e    *env
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer
	done chan struct{}
	code int
}

// start starts "ebbfs run" and returns without waiting for the mount.
func (e *env) start(args ...string) *proc {
	e.t.Helper()
	return e.startBin(ebbfsBin, args...)
}

// startBin is start with another ebbfs binary.
func (e *env) startBin(bin string, args ...string) *proc {
	e.t.Helper()
	return e.startSub(bin, "run", args...)
}

// startSub starts any ebbfs subcommand with this env's config and returns
// without waiting for it.
func (e *env) startSub(bin, sub string, args ...string) *proc {
	e.t.Helper()
	cmd := e.command(context.Background(), bin, append([]string{sub, "-c", e.cfg}, args...)...)
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	p := &proc{e: e, cmd: cmd, out: out, done: make(chan struct{})}
	e.procsMu.Lock()
	e.procs = append(e.procs, p)
	e.procsMu.Unlock()
	go func() {
		err := cmd.Wait()
		p.code = 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		} else if err != nil {
			p.code = -1
		}
		close(p.done)
	}()
	e.t.Cleanup(func() {
		p.kill()
		e.forceUnmount()
		if e.t.Failed() {
			e.t.Logf("ebbfs %s %v output:\n%s", sub, args, out.String())
		}
	})
	return p
}

// mount starts "ebbfs run" and waits until the mount is up.
func (e *env) mount(args ...string) *proc {
	e.t.Helper()
	p := e.start(args...)
	p.waitMounted()
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitMounted waits for the mount and for "ebbfs run" to finish starting.
// The mount answers before the writer logs "ebbfs running": go-fuse's mount
// check still holds a file open on it then, and a writer killed in that
// window never exits (its close waits for a FLUSH only it could answer).
func (p *proc) waitMounted() {
	p.e.t.Helper()
	if !p.waitUp(mountTimeout, true) {
		p.e.t.Fatalf("ebbfs run exited with %d before mounting:\n%s", p.code, p.out.String())
	}
}

// waitUp polls until the writer is up (its mount live and, when running
// is set, "ebbfs running" logged) or has exited, and reports whether it
// came up; it fails the test if neither happens within timeout.
func (p *proc) waitUp(timeout time.Duration, running bool) bool {
	p.e.t.Helper()
	up := false
	if !testutil.Until(timeout, func() bool {
		if p.exited() {
			return true
		}
		up = isLiveMount(p.e.mnt) && (!running || strings.Contains(p.out.String(), `msg="ebbfs running"`))
		return up
	}) {
		p.e.t.Fatalf("%s neither mounted nor exited within %s:\n%s", p.e.mnt, timeout, tail(p.out.String(), 80))
	}
	return up
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait() int {
	p.e.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(exitTimeout):
		p.e.t.Fatalf("ebbfs run did not exit within %s:\n%s", exitTimeout, p.out.String())
		return -1
	}
}

// stop sends SIGTERM and requires exit 0 and the mount gone.
func (p *proc) stop() {
	p.e.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.e.t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		p.e.t.Fatalf("ebbfs run exited with %d after SIGTERM, want 0:\n%s", code, p.out.String())
	}
	if isMounted(p.e.mnt) {
		p.e.t.Fatalf("%s still mounted after ebbfs run exited", p.e.mnt)
	}
}

// kill sends SIGKILL (a crash) and waits for the process to die.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	// A FUSE daemon killed while a request to its own mount is in flight
	// (it held a file open on it) cannot finish exiting: the kernel waits
	// for a reply only it could send. Aborting the connection frees it.
	if abortFUSE(p.e.mnt) {
		p.e.t.Logf("aborted the FUSE connection of %s to let the killed writer exit", p.e.mnt)
	}
	select {
	case <-p.done:
	case <-time.After(exitTimeout):
	}
}

// abortFUSE aborts the FUSE connection of the mount at mnt through fusectl,
// mounting fusectl first where the machine has not.
func abortFUSE(mnt string) bool {
	dev := mountDev(mnt)
	i := strings.IndexByte(dev, ':')
	if i < 0 {
		return false
	}
	const conns = "/sys/fs/fuse/connections"
	abort := conns + "/" + dev[i+1:] + "/abort"
	if _, err := os.Stat(abort); err != nil && mountType(conns) != "fusectl" {
		_ = syscall.Mount("fusectl", conns, "fusectl", 0, "")
	}
	return os.WriteFile(abort, []byte("1"), 0) == nil
}

// mountDev returns the major:minor of the ebbfs mount at p, or "".
func mountDev(p string) string {
	if m, ok, _ := mountinfo.Find(p); ok && m.FSType == "fuse.ebbfs" {
		return m.Dev
	}
	return ""
}

// forceUnmount removes whatever is mounted at the mountpoint.
func (e *env) forceUnmount() {
	for i := 0; i < 10 && isMounted(e.mnt); i++ {
		_ = exec.Command("fusermount3", "-u", "-z", e.mnt).Run()
		if isMounted(e.mnt) {
			_ = syscall.Unmount(e.mnt, syscall.MNT_DETACH)
		}
	}
}

// mountType returns the mountinfo fstype of mountpoint p, or "".
func mountType(p string) string { return testutil.MountType(p) }

func isMounted(p string) bool { return mountType(p) == "fuse.ebbfs" }

// isLiveMount reports an ebbfs mount with a daemon behind it: a writer
// killed with SIGKILL leaves a dead one until the next run detaches it.
func isLiveMount(p string) bool {
	if !isMounted(p) {
		return false
	}
	var st syscall.Statfs_t
	return syscall.Statfs(p, &st) == nil
}

// storeTree records every file under the local store: path -> size, mode,
// mtime and content.
func (e *env) storeTree() map[string]string {
	e.t.Helper()
	out := map[string]string{}
	err := filepath.Walk(e.store, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(e.store, p)
		desc := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) path(rel string) string { return filepath.Join(e.mnt, rel) }

func writeFile(t testing.TB, p string, data []byte) {
	t.Helper()
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fsyncFile fsyncs a file (the durability barrier through FUSE).
func fsyncFile(t testing.TB, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", p, err)
	}
}

func lookPath(tool string) (string, error) { return exec.LookPath(tool) }
