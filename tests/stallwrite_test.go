package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"ebbfs.dev/ebbfs/fs/fuse"
	"ebbfs.dev/ebbfs/internal/s3test"
	"golang.org/x/sys/unix"
)

// The stalled-write child is this test binary started again with
// EBBFS_STALLWRITE_FILE set: it runs before TestMain and exits.
func init() {
	if path := os.Getenv("EBBFS_STALLWRITE_FILE"); path != "" {
		os.Exit(stallWriteChild(path, os.Getenv("EBBFS_STALLWRITE_STORM") != ""))
	}
}

const (
	stallChunk = 1 << 20
	stallMax   = 1 << 30 // a write must have blocked long before this
)

// stallReport is what the stalled-write child prints.
type stallReport struct {
	Bytes   int64         // written before the call that failed
	Longest time.Duration // the longest write that succeeded
	Failed  time.Duration // how long the failing call ran
	Errno   string        // how it failed
	Signals int64
}

// stallWriteChild writes path in 1 MiB pwrite calls (raw system calls, so
// that EINTR is seen) until one fails, and reports. With storm, SIGUSR1
// (handled) reaches the writing thread every 200 µs; without, it prints
// "blocked" once a write has run for 300 ms, and waits to be killed.
func stallWriteChild(path string, storm bool) int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stall child: open:", err)
		return 2
	}
	var stop func() int64
	if storm {
		stop = startStorm(200 * time.Microsecond)
	}
	var began atomic.Int64 // UnixNano when the current write began, 0 between writes
	if !storm {
		go func() {
			for {
				if b := began.Load(); b != 0 && time.Since(time.Unix(0, b)) > 300*time.Millisecond {
					fmt.Println("blocked")
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	buf := bytes.Repeat([]byte("stalled!"), stallChunk/8)
	var rep stallReport
	for rep.Bytes < stallMax {
		start := time.Now()
		began.Store(start.UnixNano())
		n, _, errno := syscall.Syscall6(unix.SYS_PWRITE64, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(rep.Bytes), 0, 0)
		took := time.Since(start)
		began.Store(0)
		if errno != 0 {
			rep.Failed, rep.Errno = took, errno.Error()
			break
		}
		if int(n) != len(buf) {
			rep.Failed, rep.Errno = took, fmt.Sprintf("short write: %d bytes", n)
			break
		}
		rep.Bytes += int64(n)
		rep.Longest = max(rep.Longest, took)
	}
	if stop != nil {
		rep.Signals = stop()
	}
	if err := json.NewEncoder(os.Stdout).Encode(&rep); err != nil {
		return 2
	}
	return 0
}

// TestStalledWriteInterrupt: with the store stalled (the S3 server
// stopped with SIGSTOP: requests get no answer), writes fill the dirty
// limit and then block. A write under a storm of handled signals (SIGUSR1
// every 200 µs) still succeeds until then, and the one that blocks fails
// with EINTR once it has waited fuse.WriteInterruptAfter, not before; a
// writer blocked there and killed with SIGKILL ends at once, without
// waiting for that bound. Once the store is back, the data written before
// is fsynced and read back.
func TestStalledWriteInterrupt(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "stallwrite", srv.AccessKey, srv.SecretKey))
	e.init()
	p := e.mount()
	if err := syscall.Kill(srv.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(srv.Pid(), syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	child := func(file string, storm bool) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "EBBFS_STALLWRITE_FILE="+e.path(file))
		if storm {
			cmd.Env = append(cmd.Env, "EBBFS_STALLWRITE_STORM=1")
		}
		return cmd
	}

	// A handled signal: honoured only after the bound.
	cmd := child("stormed", true)
	var rep stallReport
	runChild(t, "stall child", cmd, &rep)
	t.Logf("under the storm (%d signals): %d MiB written (longest write %s), then a write failed after %s: %s",
		rep.Signals, rep.Bytes>>20, rep.Longest.Round(time.Millisecond), rep.Failed.Round(time.Millisecond), rep.Errno)
	if rep.Bytes < 64<<20 || rep.Bytes >= stallMax {
		t.Errorf("%d bytes written before a write failed: want it to block at the dirty limit (128 MiB)", rep.Bytes)
	}
	if rep.Errno != syscall.EINTR.Error() {
		t.Errorf("the blocked write ended with %q, want EINTR", rep.Errno)
	}
	if rep.Failed < fuse.WriteInterruptAfter || rep.Failed > fuse.WriteInterruptAfter+20*time.Second {
		t.Errorf("the blocked write failed after %s, want it to honour the interrupt once it has waited %s", rep.Failed, fuse.WriteInterruptAfter)
	}

	// A fatal signal: the blocked writer ends at once.
	cmd = child("killed", false)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "blocked\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("the killed child did not block: %q, %v", line, err)
	}
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, out)
	_ = cmd.Wait()
	took := time.Since(killed)
	t.Logf("a writer blocked on the stalled store ended %s after SIGKILL", took.Round(time.Millisecond))
	if took >= fuse.WriteInterruptAfter {
		t.Errorf("a writer blocked on the store took %s to die of SIGKILL, want less than %s", took, fuse.WriteInterruptAfter)
	}

	// The store comes back: what was written is made durable and reads
	// back.
	resume()
	fsyncFile(t, e.path("stormed"))
	got := readFile(t, e.path("stormed"))
	if int64(len(got)) < rep.Bytes || !bytes.Equal(got[:rep.Bytes], bytes.Repeat([]byte("stalled!"), int(rep.Bytes/8))) {
		t.Fatalf("after the store came back: %d bytes, want the %d written", len(got), rep.Bytes)
	}
	p.stop()
}
