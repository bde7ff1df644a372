// Package s3test starts a real S3 server (versitygw with its posix backend)
// for tests: in-process tests use Start, tests that spawn the real ebbfs
// binary can use the endpoint, bucket and keys of the returned Server, and
// non-test helpers can call Launch and Stop themselves.
//
// The binary is found through EBBFS_VERSITYGW, then $(go env GOPATH)/bin,
// /usr/local/bin and PATH. Without one, Start skips the test, or fails it
// when CI=true; scripts/install-s3-server.sh installs the pinned version.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"

	"ebbfs.dev/ebbfs/internal/testport"

	"ebbfs.dev/ebbfs/objstore"

	"ebbfs.dev/ebbfs/internal/worker"
)

// InstallHint tells how to get the server binary.
const InstallHint = "install versitygw with scripts/install-s3-server.sh (or point EBBFS_VERSITYGW at a binary)"

// DefaultBucket is the bucket Launch creates.
const DefaultBucket = "ebbfs-test"

const readyTimeout = 30 * time.Second

// Server is a running versitygw.
type Server struct {
	// Endpoint is the base URL, "http://127.0.0.1:<port>".
	Endpoint string
	// Region the server signs for.
	Region string
	// Bucket was created at launch and is empty.
	Bucket string
	// AccessKey and SecretKey are the server's root credentials.
	AccessKey string
	SecretKey string
	// Dir holds the posix backend's data and the server's log.
	Dir string
	// LogPath is the server's combined stdout and stderr.
	LogPath string

	cmd  *exec.Cmd
	done <-chan struct{} // closed when the process exits
	werr error

	argv []string // the command line, for Restart
}

// ErrNoBinary means no versitygw binary was found.
var ErrNoBinary = errors.New("s3test: versitygw binary not found")

// FindBinary returns the path of the versitygw binary to run.
func FindBinary() (string, error) {
	if p := os.Getenv("EBBFS_VERSITYGW"); p != "" {
		if isExec(p) {
			return p, nil
		}
		return "", fmt.Errorf("%w: EBBFS_VERSITYGW=%s is not an executable file; %s", ErrNoBinary, p, InstallHint)
	}
	var cands []string
	if gp := goPath(); gp != "" {
		cands = append(cands, filepath.Join(gp, "bin", "versitygw"))
	}
	cands = append(cands, "/usr/local/bin/versitygw")
	for _, c := range cands {
		if isExec(c) {
			return c, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w (looked in %s and PATH); %s", ErrNoBinary, strings.Join(cands, ", "), InstallHint)
}

func goPath() string {
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		// GOPATH may list several directories; the first gets go install.
		if first := strings.Split(strings.TrimSpace(string(out)), string(os.PathListSeparator))[0]; first != "" {
			return first
		}
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		return strings.Split(gp, string(os.PathListSeparator))[0]
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, "go")
	}
	return ""
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Start launches a server for the test, with its data under t.TempDir(),
// and stops it in t.Cleanup. Without a binary it skips the test, or fails
// it when CI=true.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartOn(t, "127.0.0.1")
}

// StartOn is Start with the server listening on host (an IP address of
// this machine, e.g. one end of a veth pair that another network
// namespace reaches it through); the Endpoint names that address.
func StartOn(t testing.TB, host string) *Server {
	t.Helper()
	return startWith(t, host)
}

// StartWith is Start with options of the posix backend (ChecksumETags).
func StartWith(t testing.TB, backendArgs ...string) *Server {
	t.Helper()
	return startWith(t, "127.0.0.1", backendArgs...)
}

func startWith(t testing.TB, host string, backendArgs ...string) *Server {
	t.Helper()
	if _, err := FindBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v", err)
		}
		t.Skipf("%v", err)
	}
	s, err := LaunchWith(t.TempDir(), host, backendArgs...)
	if err != nil {
		t.Fatalf("start S3 server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop S3 server: %v", err)
		}
	})
	return s
}

// StartWrapped is StartOn with the server's command line prefixed by wrap
// (e.g. "nsenter", "--net=/run/netns/NAME" to run it in a network
// namespace where host is one of its addresses). The port is chosen at
// random, since host need not be an address of this namespace.
func StartWrapped(t testing.TB, host string, wrap ...string) *Server {
	t.Helper()
	if _, err := FindBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v", err)
		}
		t.Skipf("%v", err)
	}
	bin, err := FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var s *Server
	for try := range 5 { // a random port may be taken
		port := 20000 + int(randUint16()%30000)
		s, err = launch(bin, filepath.Join(dir, fmt.Sprintf("vgw%d", try)), host, port, wrap, nil)
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start S3 server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop S3 server: %v", err)
		}
	})
	return s
}

func randUint16() uint16 {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return uint16(b[0])<<8 | uint16(b[1])
}

// Launch starts a server with its data and log under dir (which must exist)
// and creates DefaultBucket. The caller must call Stop.
func Launch(dir string) (*Server, error) {
	return LaunchOn(dir, "127.0.0.1")
}

// LaunchOn is Launch listening on host.
func LaunchOn(dir, host string) (*Server, error) {
	return LaunchWith(dir, host)
}

// ChecksumETags is an option of the posix backend: ETags derived from the
// checksums of the data instead of its MD5, as some stores' are (AWS's
// under SSE-KMS). The server then does not hash every byte with MD5,
// which on a 2-core machine took more CPU than ebbfs's whole write path.
const ChecksumETags = "--data-integrity-etag"

// LaunchWith is LaunchOn with options of the posix backend (ChecksumETags).
func LaunchWith(dir, host string, backendArgs ...string) (*Server, error) {
	bin, err := FindBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for try := range 3 { // a free port can be taken before the server binds it
		port, err := freePort(host)
		if err != nil {
			return nil, err
		}
		s, err := launch(bin, filepath.Join(dir, fmt.Sprintf("vgw%d", try)), host, port, nil, backendArgs)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort(host string) (int, error) { return testport.Free(host) }

// xattrsWork reports whether dir's file system stores user xattrs, which
// the posix backend needs unless given a sidecar directory.
func xattrsWork(dir string) bool {
	p := filepath.Join(dir, ".xattr-probe")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return false
	}
	defer os.Remove(p)
	return unix.Setxattr(p, "user.probe", []byte("1"), 0) == nil
}

func launch(bin, dir, host string, port int, wrap, backendArgs []string) (*Server, error) {
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint:  "http://" + net.JoinHostPort(host, strconv.Itoa(port)),
		Region:    "us-east-1",
		Bucket:    DefaultBucket,
		AccessKey: "ebbfs" + randHex(6),
		SecretKey: randHex(20),
		Dir:       dir,
		LogPath:   filepath.Join(dir, "versitygw.log"),
		done:      make(chan struct{}),
	}
	args := []string{
		"--port", net.JoinHostPort(host, strconv.Itoa(port)),
		"--access", s.AccessKey,
		"--secret", s.SecretKey,
		"--region", s.Region,
		"--quiet",
		"posix",
	}
	args = append(args, backendArgs...)
	if !xattrsWork(data) {
		meta := filepath.Join(dir, "meta")
		if err := os.MkdirAll(meta, 0o755); err != nil {
			return nil, err
		}
		args = append(args, "--sidecar", meta)
	}
	args = append(args, data)
	s.argv = append(append(append([]string(nil), wrap...), bin), args...)
	if err := s.exec(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := s.CreateBucket(ctx, s.Bucket); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return s, nil
}

// exec starts the process of s.argv and waits until it answers.
func (s *Server) exec() error {
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child keeps its own descriptor
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = serverEnv()
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("s3test: run %s: %w", s.argv[0], err)
	}
	// The reaper's Done is the process's exit; Stop and Kill wait for it.
	reaper := worker.Start("s3test-reaper", nil, func(*worker.Worker) { s.werr = cmd.Wait() })
	s.cmd, s.done = cmd, reaper.Done()
	if err := s.waitReady(); err != nil {
		_ = s.Stop()
		return fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return nil
}

// Pid returns the server's process id (for SIGSTOP and SIGCONT).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Kill kills the server with SIGKILL (a crash) and waits for it to exit.
func (s *Server) Kill() error {
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("s3test: versitygw (pid %d) did not exit after SIGKILL", s.cmd.Process.Pid)
	}
}

// Restart starts the server again after Kill or Stop: the same address,
// credentials and data directory, so clients reconnect to what they had.
func (s *Server) Restart() error {
	select {
	case <-s.done:
	default:
		return fmt.Errorf("s3test: versitygw (pid %d) still runs", s.cmd.Process.Pid)
	}
	return s.exec()
}

// serverEnv is the environment without settings that would change the
// server's behaviour behind the flags' back.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "VGW_") || strings.HasPrefix(name, "ROOT_ACCESS_KEY") ||
			strings.HasPrefix(name, "ROOT_SECRET") || name == "LOGFILE" || name == "WEBHOOK" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// waitReady polls until the server answers HTTP (any status) or exits.
func (s *Server) waitReady() error {
	cli := &http.Client{Timeout: 500 * time.Millisecond}
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("s3test: versitygw exited during startup: %v", s.werr)
		default:
		}
		resp, err := cli.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("s3test: versitygw did not answer on %s within %v", s.Endpoint, readyTimeout)
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.LogPath)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return "versitygw log:\n" + string(bytes.TrimSpace(b))
}

// Stop terminates the server (SIGTERM, then SIGKILL after 5 s) and waits
// for it. Calling it again is harmless.
func (s *Server) Stop() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("s3test: versitygw (pid %d) did not exit", s.cmd.Process.Pid)
	}
}

// Config returns a store configuration for keys under prefix in the
// server's bucket, with the root credentials filled in.
func (s *Server) Config(prefix string) objstore.S3Config {
	return objstore.S3Config{
		Bucket:          s.Bucket,
		Prefix:          prefix,
		Endpoint:        s.Endpoint,
		Region:          s.Region,
		PathStyle:       true,
		AccessKeyID:     s.AccessKey,
		SecretAccessKey: s.SecretKey,
	}
}

// Env returns the AWS_* variables a child process (the real ebbfs binary)
// needs to reach the server through the SDK's default credential chain.
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// Setenv sets Env() in this test's environment (not for parallel tests).
func (s *Server) Setenv(t testing.TB) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// URL returns the ebbfs store URL for prefix in the server's bucket;
// pass Endpoint alongside it.
func (s *Server) URL(prefix string) string {
	return "s3://" + s.Bucket + "/" + strings.TrimLeft(prefix, "/")
}

// Client returns an SDK client for the server, for setup and inspection.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

// CreateBucket creates another bucket on the server.
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("s3test: create bucket %s: %w", name, err)
	}
	return nil
}
