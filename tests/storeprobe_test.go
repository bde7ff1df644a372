package tests

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
)

// silentListener accepts TCP connections and never answers on them: an
// S3 endpoint that hangs. It closes everything at the test's end.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// withStoreTimeout sets [storage] connect_timeout.
func withStoreTimeout(d string) envOption {
	return func(e *env) { e.storage += "connect_timeout = \"" + d + "\"\n" }
}

// checkNoSDKNoise fails the test if out holds what the AWS SDK says on
// its own, which must not reach the user.
func checkNoSDKNoise(t *testing.T, what, out string) {
	t.Helper()
	for _, noise := range []string{"IMDS", "operation error", "https response error", "SDK ", "retry quota", "RequestID"} {
		if strings.Contains(out, noise) {
			t.Errorf("%s: the SDK's own words (%q) reach the user:\n%s", what, noise, out)
		}
	}
}

// TestSilentStoreWaitingLineAndTimeout: against an endpoint that accepts
// connections and never answers, init, run and fsck each say what they
// wait for within 5 s and give up by storage.connect_timeout (10 s here)
// with a clear error.
func TestSilentStoreWaitingLineAndTimeout(t *testing.T) {
	endpoint := silentListener(t)
	const timeout = 10 * time.Second
	var wg sync.WaitGroup
	for _, sub := range []string{"init", "run", "fsck"} {
		e := newEnv(t, withS3(endpoint, "us-east-1", "bucket", "fs", "key", "secretsecret"), withStoreTimeout("10s"))
		start := time.Now()
		p := e.startSub(ebbfsBin, sub)
		wg.Add(1)
		go func() {
			defer wg.Done()
			waiting := "waiting for " + endpoint + ": no answer"
			var sawAt time.Duration
			for sawAt == 0 {
				select {
				case <-p.done:
					if !strings.Contains(p.out.String(), waiting) {
						t.Errorf("%s exited (%d) without the waiting line:\n%s", sub, p.code, p.out.String())
						return
					}
					sawAt = -1
				case <-time.After(50 * time.Millisecond):
					if strings.Contains(p.out.String(), waiting) {
						sawAt = time.Since(start)
					}
				}
			}
			// The promise is the process's own clock: its first
			// waiting line says how long it has had no answer, at most
			// 5 s. The test's clock also counts the start of a process
			// on a loaded machine, so it only catches a line that never
			// comes in time at all.
			if sawAt < 0 || sawAt > 60*time.Second {
				t.Errorf("%s: the waiting line came after %s:\n%s", sub, sawAt, p.out.String())
			}
			if first := firstWaitSecs(p.out.String(), waiting); first < 1 || first > 5 {
				t.Errorf("%s: the first waiting line says no answer for %d s, want 1-5 s:\n%s", sub, first, p.out.String())
			}
			<-p.done
			took := time.Since(start)
			out := p.out.String()
			t.Logf("%s: waiting line after %s, exit %d after %s: %s", sub, sawAt.Round(time.Millisecond), p.code, took.Round(time.Millisecond), lastLine(out))
			if p.code != 1 {
				t.Errorf("%s exited %d, want 1:\n%s", sub, p.code, out)
			}
			if took < timeout || took > timeout+60*time.Second {
				t.Errorf("%s gave up after %s, want about %s", sub, took, timeout)
			}
			last := lastLine(out)
			for _, want := range []string{"ebbfs: ", endpoint, "no answer for", "gave up", "storage.connect_timeout"} {
				if !strings.Contains(last, want) {
					t.Errorf("%s: the error %q does not say %q", sub, last, want)
				}
			}
			checkNoSDKNoise(t, sub, out)
		}()
		if sub == "run" {
			t.Cleanup(func() {
				if isMounted(e.mnt) {
					t.Errorf("run mounted %s without a store", e.mnt)
				}
			})
		}
	}
	wg.Wait()
}

// firstWaitSecs is N in the first "<waiting> for N s" line of out, or -1.
func firstWaitSecs(out, waiting string) int {
	_, rest, ok := strings.Cut(out, waiting+" for ")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(strings.Fields(rest)[0])
	if err != nil {
		return -1
	}
	return n
}

// TestStoreRefusalsExplained: a closed port, missing credentials, a
// missing bucket and a wrong region each end the command with one line
// that says what to do, and nothing from the SDK.
func TestStoreRefusalsExplained(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	closed := "http://" + freeAddr(t) // claimed for this test, nothing listens
	noCreds := func(e *env) {
		home := filepath.Join(e.dir, "home")
		if err := os.Mkdir(home, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
		e.extraEnv = append(e.extraEnv, "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=", "AWS_PROFILE=",
			"AWS_EC2_METADATA_DISABLED=", "HOME="+home, "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(home, "none"), "AWS_CONFIG_FILE="+filepath.Join(home, "none"))
	}
	cases := []struct {
		name string
		opts []envOption
		want []string
	}{
		{"refused", []envOption{withS3(closed, "us-east-1", "bucket", "fs", "key", "secretsecret"), withStoreTimeout("3s")},
			[]string{closed, "connection refused", "storage.endpoint", "gave up"}},
		{"no credentials", []envOption{withS3(srv.Endpoint, srv.Region, srv.Bucket, "fs", "", ""), noCreds},
			[]string{"no AWS credentials", "AWS_ACCESS_KEY_ID", "AWS_PROFILE"}},
		{"no bucket", []envOption{withS3(srv.Endpoint, srv.Region, "no-such-bucket", "fs", srv.AccessKey, srv.SecretKey)},
			[]string{`bucket "no-such-bucket" does not exist`, "storage.url"}},
		{"wrong region", []envOption{withS3(srv.Endpoint, "eu-west-3", srv.Bucket, "fs", srv.AccessKey, srv.SecretKey)},
			[]string{`not in region "eu-west-3"`, "storage.region"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts...)
			for _, sub := range []string{"init", "fsck"} {
				r := e.ebbfs(sub)
				t.Logf("%s: %s", sub, strings.TrimSpace(r.stderr))
				if r.code != 1 {
					t.Fatalf("%s: exit %d, want 1:\n%s", sub, r.code, r)
				}
				last := lastLine(r.stderr)
				for _, w := range tc.want {
					if !strings.Contains(last, w) {
						t.Errorf("%s: the error %q does not say %q", sub, last, w)
					}
				}
				checkNoSDKNoise(t, sub, r.stderr)
			}
		})
	}
}
