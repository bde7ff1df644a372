package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"ebbfs.dev/ebbfs/internal/s3test"
	"golang.org/x/sys/unix"
)

// The signal-storm child is this test binary started again with
// EBBFS_SIGSTORM_FILE set: it runs before TestMain and exits.
func init() {
	if path := os.Getenv("EBBFS_SIGSTORM_FILE"); path != "" {
		os.Exit(sigstormChild(path))
	}
}

const (
	stormBlock    = 4096
	stormMapPages = 16
)

// stormReport is what the child prints.
type stormReport struct {
	Fsync, Fdatasync, Msync    int
	Pwrite, Write              int // write calls made
	EINTRFsync, EINTRFdatasync int
	EINTRMsync                 int
	EINTRPwrite, EINTRWrite    int // retried, but each one a failure
	ShortWrites                int // writes that returned fewer bytes
	Errors                     int // durability calls failing otherwise
	FirstError                 string
	Signals                    int64
	Elapsed                    time.Duration
	Done                       int
}

// stormPiece is how much one write call writes: a round's block goes in
// four calls.
const stormPiece = stormBlock / 4

// stormBlockData is the 4 KiB block written in round i.
func stormBlockData(i int) []byte {
	b := bytes.Repeat([]byte{byte(i*7 + 1)}, stormBlock)
	binary.LittleEndian.PutUint64(b, uint64(i))
	return b
}

// sigstormChild writes and syncs path (and path.map through a shared
// mapping) for the given number of rounds while another thread sends
// SIGUSR1 to the syncing thread every interval. Go's wrappers retry EINTR,
// so the durability calls are made as raw system calls and EINTR is
// counted, not retried.
func sigstormChild(path string) int {
	rounds, _ := strconv.Atoi(os.Getenv("EBBFS_SIGSTORM_ROUNDS"))
	interval, _ := time.ParseDuration(os.Getenv("EBBFS_SIGSTORM_INTERVAL"))
	var rep stormReport
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "sigstorm child: "+format+"\n", args...)
		return 2
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stopStorm := startStorm(interval)

	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fail("open: %v", err)
	}
	defer unix.Close(fd)
	mfd, err := unix.Open(path+".map", unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fail("open map: %v", err)
	}
	defer unix.Close(mfd)
	if err := unix.Ftruncate(mfd, stormMapPages*stormBlock); err != nil {
		return fail("ftruncate: %v", err)
	}
	m, err := unix.Mmap(mfd, 0, stormMapPages*stormBlock, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap: %v", err)
	}
	defer unix.Munmap(m)

	note := func(errno syscall.Errno, eintr *int) {
		switch {
		case errno == 0:
		case errno == syscall.EINTR:
			*eintr++
		default:
			rep.Errors++
			if rep.FirstError == "" {
				rep.FirstError = errno.Error()
			}
		}
	}
	start := time.Now()
	for i := 0; i < rounds; i++ {
		b := stormBlockData(i)
		switch i % 3 {
		case 0, 1:
			if err := stormWrite(&rep, fd, b, int64(i)*stormBlock, i%3 == 0); err != nil {
				return fail("round %d: %v", i, err)
			}
			if i%3 == 0 {
				_, _, errno := syscall.Syscall(unix.SYS_FSYNC, uintptr(fd), 0, 0)
				rep.Fsync++
				note(errno, &rep.EINTRFsync)
			} else {
				_, _, errno := syscall.Syscall(unix.SYS_FDATASYNC, uintptr(fd), 0, 0)
				rep.Fdatasync++
				note(errno, &rep.EINTRFdatasync)
			}
		case 2:
			page := (i / 3) % stormMapPages
			copy(m[page*stormBlock:], b)
			err := unix.Msync(m, unix.MS_SYNC)
			rep.Msync++
			var errno syscall.Errno
			if err != nil && !errors.As(err, &errno) {
				return fail("msync: %v", err)
			}
			note(errno, &rep.EINTRMsync)
		}
		rep.Done++
	}
	rep.Elapsed = time.Since(start)
	rep.Signals = stopStorm()
	if err := json.NewEncoder(os.Stdout).Encode(&rep); err != nil {
		return fail("report: %v", err)
	}
	return 0
}

// startStorm sends SIGUSR1, handled (not ignored, not fatal), to the
// calling thread (which must be locked to it) every interval from another
// thread, until the returned function is called; that returns how many
// were sent. Every delivery interrupts whatever system call the thread is
// in.
func startStorm(interval time.Duration) (stop func() int64) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	pid, tid := unix.Getpid(), unix.Gettid()
	stopped := make(chan struct{})
	done := make(chan struct{})
	var sent atomic.Int64
	go func() {
		defer close(done)
		runtime.LockOSThread()
		ts := unix.NsecToTimespec(interval.Nanoseconds())
		for {
			select {
			case <-stopped:
				return
			case <-sigs:
			default:
			}
			if unix.Tgkill(pid, tid, syscall.SIGUSR1) == nil {
				sent.Add(1)
			}
			_ = unix.Nanosleep(&ts, nil)
		}
	}()
	return func() int64 {
		close(stopped)
		<-done
		signal.Stop(sigs)
		return sent.Load()
	}
}

// stormWrite writes b at off in pieces of stormPiece, with pwrite(2) or
// with lseek(2) and write(2), as raw system calls: an EINTR is counted
// (and the piece written again), not hidden by a wrapper's retry.
func stormWrite(rep *stormReport, fd int, b []byte, off int64, positional bool) error {
	for p := 0; p < len(b); p += stormPiece {
		piece := b[p : p+stormPiece]
		at := off + int64(p)
		for {
			var n uintptr
			var errno syscall.Errno
			if positional {
				rep.Pwrite++
				n, _, errno = syscall.Syscall6(unix.SYS_PWRITE64, uintptr(fd), uintptr(unsafe.Pointer(&piece[0])), uintptr(len(piece)), uintptr(at), 0, 0)
			} else {
				if _, err := unix.Seek(fd, at, io.SeekStart); err != nil {
					return fmt.Errorf("lseek: %w", err)
				}
				rep.Write++
				n, _, errno = syscall.Syscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&piece[0])), uintptr(len(piece)))
			}
			if errno == syscall.EINTR {
				if positional {
					rep.EINTRPwrite++
				} else {
					rep.EINTRWrite++
				}
				continue
			}
			if errno != 0 {
				return fmt.Errorf("write at %d: %w", at, errno)
			}
			if int(n) != len(piece) {
				rep.ShortWrites++
				return fmt.Errorf("write at %d: %d of %d bytes", at, n, len(piece))
			}
			break
		}
	}
	return nil
}

// runChild runs a child of this test binary and decodes the JSON report
// it prints into rep.
func runChild(t *testing.T, what string, cmd *exec.Cmd, rep any) {
	t.Helper()
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", what, err, so.String(), se.String())
	}
	if err := json.Unmarshal(so.Bytes(), rep); err != nil {
		t.Fatalf("%s's report %q: %v", what, so.String(), err)
	}
}

// stormWant returns what the child leaves in its two files: the blocks of
// the write rounds at their slots (msync rounds leave holes), and the last
// block each page of the mapping received.
func stormWant(rounds int) (data, mapped []byte) {
	end := 0
	for i := 0; i < rounds; i++ {
		if i%3 != 2 {
			end = (i + 1) * stormBlock
		}
	}
	data = make([]byte, end)
	mapped = make([]byte, stormMapPages*stormBlock)
	for i := 0; i < rounds; i++ {
		if i%3 != 2 {
			copy(data[i*stormBlock:], stormBlockData(i))
		} else {
			copy(mapped[((i/3)%stormMapPages)*stormBlock:], stormBlockData(i))
		}
	}
	return data, mapped
}

// TestSignalStormDurabilityCalls: a process that catches SIGUSR1 every
// 200 µs while it writes (pwrite and write, each 4 KiB block in four
// calls, most of them into an extent already committed: a read-modify-
// write), fsyncs, fdatasyncs and msyncs on the mount never sees EINTR
// from a write or a durability call (a write honours an interrupt only
// after fuse.WriteInterruptAfter; the barrier is not abandoned on a FUSE
// interrupt), and everything it synced survives kill -9 and the loss of
// the cache directory.
func TestSignalStormDurabilityCalls(t *testing.T) {
	t.Parallel()
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		testSignalStorm(t, newEnv(t))
	})
	// On S3 a partial write's base may not be in memory: the engine
	// reads it from the disk cache or the store, where it looks at the
	// request's context.
	t.Run("s3", func(t *testing.T) {
		t.Parallel()
		srv := s3test.Start(t)
		testSignalStorm(t, newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "storm", srv.AccessKey, srv.SecretKey)))
	})
}

func testSignalStorm(t *testing.T, e *env) {
	e.init()
	p := e.mount()

	rounds := 3000
	if testing.Short() {
		rounds = 600
	}
	path := e.path("storm.bin")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"EBBFS_SIGSTORM_FILE="+path,
		"EBBFS_SIGSTORM_ROUNDS="+strconv.Itoa(rounds),
		"EBBFS_SIGSTORM_INTERVAL=200us")
	var rep stormReport
	runChild(t, "signal-storm child", cmd, &rep)
	t.Logf("signal storm: %d rounds in %s, %d SIGUSR1 sent; pwrite %d (EINTR %d), write %d (EINTR %d), fsync %d (EINTR %d), fdatasync %d (EINTR %d), msync %d (EINTR %d), other errors %d",
		rep.Done, rep.Elapsed.Round(time.Millisecond), rep.Signals, rep.Pwrite, rep.EINTRPwrite, rep.Write, rep.EINTRWrite,
		rep.Fsync, rep.EINTRFsync, rep.Fdatasync, rep.EINTRFdatasync, rep.Msync, rep.EINTRMsync, rep.Errors)
	if rep.Done != rounds || rep.Fsync+rep.Fdatasync+rep.Msync != rounds {
		t.Fatalf("child did %d rounds, %d durability calls; want %d", rep.Done, rep.Fsync+rep.Fdatasync+rep.Msync, rounds)
	}
	// The storm must have been a storm: at least one signal per call.
	if rep.Signals < int64(rounds) {
		t.Fatalf("only %d signals for %d calls: the storm did not happen", rep.Signals, rounds)
	}
	if n := rep.EINTRFsync + rep.EINTRFdatasync + rep.EINTRMsync; n != 0 {
		t.Errorf("%d durability calls failed with EINTR (fsync %d, fdatasync %d, msync %d)",
			n, rep.EINTRFsync, rep.EINTRFdatasync, rep.EINTRMsync)
	}
	if rep.Errors != 0 {
		t.Errorf("%d durability calls failed, first: %s", rep.Errors, rep.FirstError)
	}
	if n := rep.EINTRPwrite + rep.EINTRWrite; n != 0 {
		t.Errorf("%d of %d writes failed with EINTR (pwrite %d, write %d)",
			n, rep.Pwrite+rep.Write, rep.EINTRPwrite, rep.EINTRWrite)
	}
	if want := rounds / 3 * 4; rep.Pwrite < want || rep.Write < want {
		t.Errorf("%d pwrite and %d write calls, want at least %d each", rep.Pwrite, rep.Write, want)
	}

	wantData, wantMap := stormWant(rounds)
	check := func(when string) {
		t.Helper()
		if got := readFile(t, path); !bytes.Equal(got, wantData) {
			t.Fatalf("%s: storm.bin differs (%d bytes, want %d)", when, len(got), len(wantData))
		}
		if got := readFile(t, path+".map"); !bytes.Equal(got, wantMap) {
			t.Fatalf("%s: storm.bin.map differs", when)
		}
	}
	check("on the live mount")

	// Everything was synced: it survives a crash and the loss of the
	// cache directory (recovery from the store alone).
	p.kill()
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	check("after kill -9 and recovery from the store")
	p.stop()
}
