package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// vm is the VM case: an ext4 file system on a loop device over nbdfuse's
// file of an NBD export, and fio inside it: 4 KiB random writes each
// followed by an fsync for -vm-time, then (page cache dropped) 4 KiB
// O_DIRECT random reads, 16 in flight, for -vm-time, over a file of
// -vm-file written beforehand (not timed). On an ebbfs target the export
// is ebbfs's own (a file in /.nbd/, over its NBD unix socket); on the
// others qemu-nbd serves a raw image file in the target's directory, so
// the client side (nbdfuse, loop, ext4) is the same everywhere.
func (b *bench) vm(t *target) {
	fail := func(err error) {
		for _, k := range []string{"vmrandwrite", "vmrandread"} {
			b.measure(k, t, func() (float64, error) { return 0, err })
		}
	}
	n := len(b.all["vmrandwrite"][t.name]) + 1
	tag := fmt.Sprintf("%s-r%d", t.name, n)
	nbdDir := filepath.Join(b.work, "nbdfuse-"+tag)
	var img string
	var argv []string
	if t.layout != nil {
		name := fmt.Sprintf("vm%d", n)
		img = filepath.Join(t.dir, ".nbd", name)
		argv = []string{"nbdfuse", nbdDir, fmt.Sprintf("nbd+unix:///%s?socket=%s", name, filepath.Join(t.cache, "nbd.sock"))}
	} else {
		img = filepath.Join(t.dir, fmt.Sprintf("vm%d.img", n))
		argv = []string{"nbdfuse", nbdDir, "[", "qemu-nbd", "-f", "raw", "--cache=writeback", img, "]"}
	}
	if err := makeImage(img, b.o.db.vmSize); err != nil {
		fail(err)
		return
	}
	if err := os.Mkdir(nbdDir, 0o755); err != nil {
		fail(err)
		return
	}
	srv, err := startServer("nbdfuse-"+t.name, nbdDir, "fuse", filepath.Join(b.work, "nbdfuse-"+tag+".log"), argv...)
	if err != nil {
		fail(err)
		return
	}
	defer func() {
		if _, err := srv.stop(time.Minute); err != nil {
			b.vmFailed(t, fmt.Errorf("stopping nbdfuse: %w", err))
		}
	}()
	file := filepath.Join(nbdDir, "nbd")
	if fi, err := os.Stat(file); err != nil || fi.Size() != b.o.db.vmSize {
		fail(fmt.Errorf("nbdfuse's file %s: %v (size %v, want %d)", file, err, fi, b.o.db.vmSize))
		return
	}
	out, err := runHelper(exec.Command("losetup", "--find", "--show", file))
	if err != nil {
		fail(fmt.Errorf("losetup: %v: %s", err, out))
		return
	}
	dev := strings.TrimSpace(string(out))
	mnt := filepath.Join(b.work, "ext4-"+tag)
	vmStack.set(dev, mnt)
	defer vmStack.set("", "")
	defer func() {
		if err := loopDetach(dev); err != nil {
			b.vmFailed(t, err)
		}
	}()
	if err := mkfsMount(dev, mnt); err != nil {
		fail(err)
		return
	}
	defer func() {
		if out, err := runHelper(exec.Command("umount", mnt)); err != nil {
			b.vmFailed(t, fmt.Errorf("umount %s: %v: %s", mnt, err, out))
		}
	}()
	b.vmFio(t, filepath.Join(mnt, "fio.dat"), filepath.Join(b.work, "fio-"+tag))
}

// vmStack is the VM case's ext4 mount and loop device while they exist,
// for cleanup after a signal or the watchdog.
var vmStack vmState

type vmState struct {
	sync.Mutex
	dev, mnt string
}

func (v *vmState) set(dev, mnt string) {
	v.Lock()
	v.dev, v.mnt = dev, mnt
	v.Unlock()
}

// undoVM detaches the VM case's ext4 mount (lazily) and loop device, if
// any, so that the nbdfuse mount under them can go (cleanup).
func undoVM() {
	vmStack.Lock()
	dev, mnt := vmStack.dev, vmStack.mnt
	vmStack.Unlock()
	if dev == "" {
		return
	}
	if typ, _ := mountFSType(mnt); typ == "ext4" {
		_ = exec.Command("umount", "-l", mnt).Run()
	}
	_ = exec.Command("losetup", "-d", dev).Run()
}

// vmFio runs the VM case's fio jobs on path (inside the ext4 mount).
func (b *bench) vmFio(t *target, path, out string) {
	o := b.o.db
	common := []string{"--filename=" + path, "--size=" + strconv.FormatInt(o.vmFile, 10), "--bs=4k",
		fmt.Sprintf("--randseed=%d", b.o.seed), "--time_based", fmt.Sprintf("--runtime=%d", int(o.vmTime.Seconds()))}
	if _, _, err := runFio(out+"-layout.json", "--name=layout", "--filename="+path, "--size="+strconv.FormatInt(o.vmFile, 10),
		"--rw=write", "--bs=1M", "--ioengine=psync", "--end_fsync=1"); err != nil {
		for _, k := range []string{"vmrandwrite", "vmrandread"} {
			b.measure(k, t, func() (float64, error) { return 0, fmt.Errorf("writing fio's file: %w", err) })
		}
		return
	}
	b.measureCount("vmrandwrite", t, func() (float64, int64, error) {
		return runFio(out+"-randwrite.json", append([]string{"--name=randwrite", "--rw=randwrite", "--ioengine=psync", "--fsync=1"}, common...)...)
	})
	if err := dropCaches(); err != nil {
		b.measure("vmrandread", t, func() (float64, error) { return 0, err })
		return
	}
	b.measureCount("vmrandread", t, func() (float64, int64, error) {
		return runFio(out+"-randread.json", append([]string{"--name=randread", "--rw=randread", "--ioengine=libaio", "--iodepth=16", "--direct=1"}, common...)...)
	})
}

// vmFailed marks this round's VM results of t failed (what went wrong
// while taking the stack down).
func (b *bench) vmFailed(t *target, err error) {
	fmt.Fprintf(os.Stderr, "  %-12s ERROR: %v\n", t.name, err)
	for _, k := range []string{"vmrandwrite", "vmrandread"} {
		b.amend(k, t, func(r *result) {
			if r.err == nil {
				r.err = err
			}
		})
	}
}

// makeImage creates a sparse file of size at path.
func makeImage(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// mkfsMount makes ext4 on dev (metadata only: no discard pass, lazy inode
// tables and journal) and mounts it at mnt.
func mkfsMount(dev, mnt string) error {
	if out, err := runHelper(exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1", dev)); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %v: %s", dev, err, out)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	// noinit_itable: no background zeroing of inode tables meanwhile.
	if out, err := runHelper(exec.Command("mount", "-t", "ext4", "-o", "noinit_itable", dev, mnt)); err != nil {
		return fmt.Errorf("mount %s: %v: %s", dev, err, out)
	}
	return nil
}

// loopDetach detaches a loop device and waits until the kernel has let go
// of its file (losetup -d only marks it for autoclear while it is busy).
func loopDetach(dev string) error {
	backing := filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(backing); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		out, err := runHelper(exec.Command("losetup", "-d", dev))
		if err != nil && !strings.Contains(string(out), "No such device") && time.Now().After(deadline) {
			return fmt.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still attached after losetup -d", dev)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runFio runs fio with JSON output into out and returns the job's IOPS and
// I/Os done (reads or writes, whichever it did).
func runFio(out string, args ...string) (float64, int64, error) {
	if b, err := runHelper(exec.Command("fio", append(args, "--output-format=json", "--output="+out)...)); err != nil {
		return 0, 0, fmt.Errorf("fio: %v: %s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return 0, 0, err
	}
	type dir struct {
		IOPS     float64 `json:"iops"`
		TotalIOs int64   `json:"total_ios"`
	}
	var res struct {
		Jobs []struct {
			Error int `json:"error"`
			Read  dir `json:"read"`
			Write dir `json:"write"`
		} `json:"jobs"`
	}
	// fio may print notes before the JSON.
	if i := strings.IndexByte(string(raw), '{'); i > 0 {
		raw = raw[i:]
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return 0, 0, fmt.Errorf("fio's output %s: %w", out, err)
	}
	if len(res.Jobs) != 1 || res.Jobs[0].Error != 0 {
		return 0, 0, fmt.Errorf("fio's output %s: %d jobs, error %v", out, len(res.Jobs), res.Jobs)
	}
	j := res.Jobs[0]
	if j.Write.TotalIOs > 0 {
		return j.Write.IOPS, j.Write.TotalIOs, nil
	}
	if j.Read.TotalIOs > 0 {
		return j.Read.IOPS, j.Read.TotalIOs, nil
	}
	return 0, 0, fmt.Errorf("fio's output %s: no I/O done", out)
}
