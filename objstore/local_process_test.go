package objstore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/objstore"
)

// The helper "process" tests re-run this test binary as a child with
// EBBFS_LOCAL_HELPER set; TestMain dispatches to the helper.
func TestMain(m *testing.M) {
	if mode := os.Getenv("EBBFS_LOCAL_HELPER"); mode != "" {
		os.Exit(localHelper(mode, os.Getenv("EBBFS_LOCAL_ROOT")))
	}
	os.Exit(m.Run())
}

func localHelper(mode, root string) int {
	ctx := context.Background()
	l, err := objstore.NewLocal(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch mode {
	case "increment":
		// 40 read-modify-write increments of a counter, each an IfMatch Put.
		for done := 0; done < 40; {
			info, err := l.Head(ctx, "writer.lease")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			b, err := l.Get(ctx, "writer.lease")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			n, _ := strconv.Atoi(string(b))
			_, err = l.Put(ctx, "writer.lease", []byte(strconv.Itoa(n+1)), objstore.PutOptions{IfMatch: info.ETag})
			switch {
			case err == nil:
				done++
			case objstore.IsPreconditionFailed(err):
			default:
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
		}
		return 0
	case "hold":
		// Hold the lock of one key until killed.
		if _, err := objstore.LockKeyForTests(ctx, l, "checkpoints/reader-x"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Println("locked")
		select {}
	case "churn":
		// Write self-checking objects until killed.
		for i := 0; ; i++ {
			key := fmt.Sprintf("segments/%02x/%d", i%7, i%50)
			opts := objstore.PutOptions{}
			if i%3 == 0 {
				key = fmt.Sprintf("meta/journal/%d-%08d", os.Getpid(), i)
				opts.IfAbsent = true
			}
			if _, err := l.Put(ctx, key, selfChecking(i), opts); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			if i == 20 {
				fmt.Println("ready")
			}
		}
	}
	return 2
}

// selfChecking returns a 64 KiB..1 MiB body whose first 32 bytes are the
// SHA-256 of the rest.
func selfChecking(i int) []byte {
	n := 64<<10 + (i*7919)%(960<<10)
	body := make([]byte, n)
	binary.LittleEndian.PutUint64(body[32:], uint64(i))
	for j := 40; j < n; j++ {
		body[j] = byte(i + j)
	}
	sum := sha256.Sum256(body[32:])
	copy(body, sum[:])
	return body
}

func helperCmd(t *testing.T, mode, root string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "EBBFS_LOCAL_HELPER="+mode, "EBBFS_LOCAL_ROOT="+root)
	return cmd
}

// Two processes incrementing one counter with IfMatch lose no update.
func TestLocalCrossProcessIfMatch(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	l := newLocal(t, root)
	if _, err := l.Put(ctx, "writer.lease", []byte("0"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	outs := make([][]byte, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = helperCmd(t, "increment", root).CombinedOutput()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i])
		}
	}
	b, err := l.Get(ctx, "writer.lease")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "120" {
		t.Fatalf("counter = %s after 3 processes x 40 IfMatch increments; want 120 (lost updates)", b)
	}
}

// kill -9 in the middle of writes leaves only complete objects, and the
// store reopens and keeps working.
func TestLocalKillDuringWrites(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	for round := range 3 {
		cmd := helperCmd(t, "churn", root)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := out.Read(buf); err != nil || !strings.HasPrefix(string(buf), "ready") {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("helper did not get ready: %v %q\n%s", err, buf, stderr.String())
		}
		time.Sleep(time.Duration(50+round*70) * time.Millisecond)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()

		l := newLocal(t, root)
		objs, err := objstore.ListAll(ctx, l, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) == 0 {
			t.Fatal("no objects written before the kill")
		}
		for _, o := range objs {
			b, err := l.Get(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) < 40 {
				t.Fatalf("round %d: %s is a partial object of %d bytes", round, o.Key, len(b))
			}
			sum := sha256.Sum256(b[32:])
			if !bytes.Equal(sum[:], b[:32]) {
				t.Fatalf("round %d: %s is torn (%d bytes)", round, o.Key, len(b))
			}
			h, err := l.Head(ctx, o.Key)
			if err != nil || h.ETag != o.ETag || h.Size != int64(len(b)) {
				t.Fatalf("round %d: Head(%s) = %+v, %v; listing said %+v", round, o.Key, h, err, o)
			}
		}
	}
}

// A process stopped while it holds one key's lock (a replica paused in
// the middle of renewing its checkpoint record) holds up no other key:
// every other Put and Delete goes through, and one of the held key waits
// only as long as its context.
func TestLocalStoppedLockHolderBlocksOnlyItsKey(t *testing.T) {
	root := t.TempDir()
	l := newLocal(t, root)
	cmd := helperCmd(t, "hold", root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// A minute only catches a hang: each of these takes milliseconds.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 200; i++ {
		key := fmt.Sprintf("segments/%02x/%016x", i%16, i)
		if _, err := l.Put(ctx, key, []byte("data"), objstore.PutOptions{}); err != nil {
			t.Fatalf("put %s beside a stopped lock holder: %v", key, err)
		}
		if err := l.Delete(ctx, key); err != nil {
			t.Fatalf("delete %s beside a stopped lock holder: %v", key, err)
		}
	}
	for _, op := range []string{"put", "delete"} {
		short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
		var err error
		if op == "put" {
			_, err = l.Put(short, "checkpoints/reader-x", []byte("r"), objstore.PutOptions{})
		} else {
			err = l.Delete(short, "checkpoints/reader-x")
		}
		cancelShort()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s of the held key: %v, want the end of its context", op, err)
		}
	}
	// Once the holder is gone, the key is free.
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := l.Put(ctx, "checkpoints/reader-x", []byte("r"), objstore.PutOptions{}); err != nil {
		t.Fatalf("put of the key its dead holder locked: %v", err)
	}
}
