package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// options are the command-line flags.
type options struct {
	size      int64
	files     int
	randReads int
	parent    string
	keep      bool
	seed      uint64
	timeout   time.Duration
	ebbfsBin  string
	rounds    int
	// kernelPassthrough lets the loopback use FUSE passthrough.
	kernelPassthrough bool
	// s3 adds the ebbfs-s3 target: ebbfs on the S3 test server.
	s3 bool
	// s3MD5ETags runs the S3 test server with MD5 ETags (its default)
	// rather than checksum-derived ones.
	s3MD5ETags bool
	// s3EmptyCache empties ebbfs-s3's disk cache (restarting it) before
	// its cold sequential read and each of its cold random reads.
	s3EmptyCache bool
	// s3DiskCache, if above 0, is ebbfs-s3's [cache] disk_size (a file
	// larger than it is read at random piece by piece).
	s3DiskCache int64
	// groups selects workload groups (write, read, rand, small).
	groups map[string]bool
	// cpuProfile, if set, is a directory for CPU profiles of the ebbfs
	// targets during the sequential write and the cold read.
	cpuProfile     string
	profileSeconds int
	// fsyncs is the iterations of the 4 KiB pwrite+fsync loop.
	fsyncs int
	// The random-overwrite workload: a file of rwSize, rwWrites random
	// 4 KiB pwrites, an fsync every rwFsyncEvery, then up to rwSettle for
	// the store to shrink back.
	rwSize       int64
	rwWrites     int
	rwFsyncEvery int
	// dbExtentSize, if set, is the extent size (user.ebbfs.extent_size)
	// the ebbfs targets give the files of the random overwrites and of
	// the 4 KiB write+fsync loop, as a database's directory would have.
	dbExtentSize int
	// extentSize, if set, is the extent size of every file the ebbfs
	// targets' workloads create (set on the mount's root directory).
	extentSize int
	rwSettle   time.Duration
	// db is the db group's flags (db.go).
	db dbOptions
}

// allGroups are the workload groups in the order they run in each round.
// The random overwrites come first, so that in the first round they find
// a store holding nothing else (its size is one of their figures).
var allGroups = []string{"overwrite", "fsync", "write", "read", "rand", "small"}

func main() {
	var o options
	size := sizeFlag(GiB)
	flag.Var(&size, "size", "size of the large file (a multiple of 1MiB)")
	flag.IntVar(&o.files, "files", 5000, "small files created, stat'ed and deleted")
	flag.IntVar(&o.randReads, "randreads", 20000, "4 KiB random preads")
	flag.IntVar(&o.fsyncs, "fsyncs", 2000, "iterations of the 4 KiB pwrite+fsync loop")
	rwSize := sizeFlag(256 * MiB)
	flag.Var(&rwSize, "rw-size", "size of the random-overwrite file (a multiple of 1MiB)")
	flag.IntVar(&o.rwWrites, "rw-writes", 65536, "random 4 KiB pwrites of the random-overwrite workload")
	flag.IntVar(&o.rwFsyncEvery, "rw-fsync-every", 256, "random-overwrite workload: an fsync after every this many pwrites (and after the last)")
	flag.IntVar(&o.extentSize, "extent-size", 0, "give every ebbfs file of the run this extent size (user.ebbfs.extent_size on the mount's root; 0: the default, 32768)")
	flag.IntVar(&o.dbExtentSize, "db-extent-size", 0, "give the ebbfs files of the random overwrites and the 4 KiB write+fsync loop this extent size (user.ebbfs.extent_size; 0: the default, 32768)")
	flag.DurationVar(&o.rwSettle, "rw-settle", 180*time.Second, "random-overwrite workload: wait up to this long afterwards for the ebbfs store to shrink below 1.1x the file (0: do not wait)")
	flag.StringVar(&o.parent, "dir", "/var/tmp", "directory on the disk under test; a fresh mountbench-* directory is made in it")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (files, ebbfs store, logs)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the file contents and random offsets")
	flag.DurationVar(&o.timeout, "timeout", 45*time.Minute, "abort (and clean up) after this long")
	flag.IntVar(&o.rounds, "rounds", 1, "repeat every workload this many times (rotating the target order) and report the median")
	flag.StringVar(&o.ebbfsBin, "ebbfs", "", "use this ebbfs binary instead of building ./cmd/ebbfs")
	flag.BoolVar(&o.kernelPassthrough, "kernel-passthrough", false, "let the go-fuse loopback use FUSE passthrough (the kernel then reads and writes the backing files itself)")
	flag.BoolVar(&o.s3, "s3", true, "also run ebbfs on the S3 test server (versitygw, posix backend on the same disk) as target ebbfs-s3")
	flag.BoolVar(&o.s3EmptyCache, "s3-empty-cache", false, "restart ebbfs-s3 with an empty disk cache before its cold sequential read and each of its cold random reads (a new machine reading what another wrote)")
	s3Disk := sizeFlag(0)
	flag.Var(&s3Disk, "s3-disk-cache", "ebbfs-s3's [cache] disk_size (0: ebbfs's default, 10GiB); a -size larger than it makes its cold random reads fetch pieces")
	flag.BoolVar(&o.s3MD5ETags, "s3-md5-etags", false, "run the S3 test server with MD5 ETags (it then hashes every byte uploaded with MD5 on the same cores) instead of checksum-derived ones")
	groups := flag.String("groups", strings.Join(allGroups, ","), "workload groups to run, comma-separated: "+strings.Join(allGroups, ", ")+" (read and rand read what write wrote), and db (PostgreSQL, SQLite, ext4 on NBD; not in the default: make bench-db)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write CPU profiles of the ebbfs targets during the sequential write, the cold read, the random reads and the random overwrites into this directory")
	flag.IntVar(&o.profileSeconds, "profile-seconds", 8, "length of each -cpuprofile profile")
	dbFlags(&o.db)
	serve := flag.Bool("serve-loopback", false, "internal: serve a go-fuse loopback of -src at -mnt")
	src := flag.String("src", "", "internal: with -serve-loopback, the directory to pass through")
	mnt := flag.String("mnt", "", "internal: with -serve-loopback, the mountpoint")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run ./bench/mountbench [flags]\n\n"+
			"Measures the disk, a go-fuse passthrough of a directory on it, and ebbfs on a\n"+
			"local-directory store on it, side by side. Needs root (drop_caches, mounts).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *serve {
		if err := serveLoopback(*src, *mnt, o.kernelPassthrough); err != nil {
			fmt.Fprintln(os.Stderr, "mountbench loopback:", err)
			os.Exit(1)
		}
		return
	}
	o.size = int64(size)
	o.s3DiskCache = int64(s3Disk)
	o.rwSize = int64(rwSize)
	o.groups = map[string]bool{}
	for _, g := range strings.Split(*groups, ",") {
		switch g = strings.TrimSpace(g); g {
		case "fsync", "overwrite", "write", "read", "rand", "small", "db":
			o.groups[g] = true
		default:
			fmt.Fprintf(os.Stderr, "mountbench: unknown group %q in -groups\n", g)
			os.Exit(2)
		}
	}
	if (o.groups["read"] || o.groups["rand"]) && !o.groups["write"] {
		fmt.Fprintln(os.Stderr, "mountbench: the read and rand groups read the file the write group writes")
		os.Exit(2)
	}
	if o.size < blockSize || o.size%blockSize != 0 || o.files < 1 || o.randReads < 1 || o.rounds < 1 {
		fmt.Fprintln(os.Stderr, "mountbench: -size must be a positive multiple of 1MiB; -files, -randreads and -rounds positive")
		os.Exit(2)
	}
	if o.fsyncs < 1 || o.rwSize < blockSize || o.rwSize%blockSize != 0 || o.rwWrites < 1 || o.rwFsyncEvery < 1 || o.rwSettle < 0 {
		fmt.Fprintln(os.Stderr, "mountbench: -rw-size must be a positive multiple of 1MiB; -fsyncs, -rw-writes and -rw-fsync-every positive; -rw-settle not negative")
		os.Exit(2)
	}
	if err := o.db.validate(); o.groups["db"] && err != nil {
		fmt.Fprintln(os.Stderr, "mountbench:", err)
		os.Exit(2)
	}
	os.Exit(run(o))
}

// finish is the one cleanup path, shared by a normal return, a signal and
// the watchdog: stop every server still running, then remove the work
// directory unless -keep (never while anything is still mounted in it).
var finish struct {
	once sync.Once
	work string
	keep bool
}

// aborting is set once a signal or the watchdog started the cleanup: the
// benchmark then stops touching the work directory.
var aborting atomic.Bool

func cleanup() {
	finish.once.Do(func() {
		killHelpers()
		undoVM()
		killAll()
		stopS3()
		if finish.work == "" {
			return
		}
		if left := mountsUnder(finish.work); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "mountbench: still mounted, so %s is left in place: %v\n", finish.work, left)
			return
		}
		if finish.keep {
			fmt.Fprintf(os.Stderr, "mountbench: kept %s\n", finish.work)
			return
		}
		if err := os.RemoveAll(finish.work); err != nil {
			fmt.Fprintf(os.Stderr, "mountbench: removing %s: %v\n", finish.work, err)
		}
	})
}

func run(o options) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "mountbench: needs root (it drops the page cache between phases and mounts directly)")
		return 1
	}
	if err := os.MkdirAll(o.parent, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "mountbench:", err)
		return 1
	}
	parent, err := filepath.Abs(o.parent)
	if err == nil {
		parent, err = filepath.EvalSymlinks(parent)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mountbench:", err)
		return 1
	}
	work, err := os.MkdirTemp(parent, "mountbench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mountbench:", err)
		return 1
	}
	finish.work, finish.keep = work, o.keep
	defer cleanup()

	// A closed stdout (| head) must not kill the harness before cleanup.
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		aborting.Store(true)
		fmt.Fprintf(os.Stderr, "\nmountbench: %v: unmounting and cleaning up\n", s)
		cleanup()
		os.Exit(130)
	}()
	watchdog := time.AfterFunc(o.timeout, func() {
		aborting.Store(true)
		fmt.Fprintf(os.Stderr, "\nmountbench: still running after -timeout %v: aborting\n", o.timeout)
		cleanup()
		os.Exit(1)
	})
	defer watchdog.Stop()

	defer func() {
		if aborting.Load() {
			select {} // the aborting goroutine cleans up and exits
		}
	}()
	b := &bench{o: o, work: work, pat: newPattern(o.seed), all: map[string]map[string][]result{}}
	err = b.main()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mountbench:", err)
		return 1
	}
	return 0
}

// bench is one run.
type bench struct {
	o       options
	work    string
	pat     *pattern
	targets []*target
	all     map[string]map[string][]result // row key, target name, one per round
	res     map[string]map[string]result   // the median round of all
	loads   []float64
	start   time.Time
	// The db group's programs, looked for at its first run.
	dbTools    *dbTools
	dbToolsErr error
}

// target is a filesystem under test.
type target struct {
	name   string
	dir    string  // where the workloads run
	srv    *server // nil for the disk
	sock   string  // ebbfs's admin socket, for store counters
	cache  string  // ebbfs's cache directory
	hwm    int64   // peak RSS of the server, sampled before it stops
	rss    int64
	segs   string        // the directory holding ebbfs's store's segments/ objects
	frames int64         // bytes in ebbfs's on-disk frame cache at the end
	stop   time.Duration // umount to exit
	stopE  error
	layout *ebbfsLayout // ebbfs targets: to mount again (the random reads)
	hwmOld int64        // peak RSS of earlier runs of the server (before a remount)
}

func (t *target) big() string { return filepath.Join(t.dir, "big") }

func (b *bench) main() error {
	b.start = time.Now()
	b.loads = append(b.loads, loadAvg())
	fmt.Fprintf(os.Stderr, "mountbench: work directory %s; load average %s\n", b.work, loadAvgLine())

	disk := &target{name: "disk", dir: filepath.Join(b.work, "disk")}
	if err := os.MkdirAll(disk.dir, 0o755); err != nil {
		return err
	}
	b.targets = append(b.targets, disk)

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	ptSrc, ptMnt := filepath.Join(b.work, "passthrough", "backing"), filepath.Join(b.work, "passthrough", "mnt")
	for _, d := range []string{ptSrc, ptMnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	argv := []string{exe, "-serve-loopback", "-src", ptSrc, "-mnt", ptMnt}
	if b.o.kernelPassthrough {
		argv = append(argv, "-kernel-passthrough")
	}
	pt, err := startServer("passthrough", ptMnt, loopbackFSType, filepath.Join(b.work, "passthrough", "server.log"), argv...)
	if err != nil {
		return err
	}
	b.targets = append(b.targets, &target{name: "passthrough", dir: ptMnt, srv: pt})

	bin := b.o.ebbfsBin
	if bin == "" {
		fmt.Fprintln(os.Stderr, "mountbench: go build ./cmd/ebbfs")
		if bin, err = buildEbbfs(b.work); err != nil {
			return err
		}
	}
	l, err := setupEbbfs(bin, filepath.Join(b.work, "ebbfs"), "", 0)
	if err != nil {
		return err
	}
	eb, err := startEbbfs(l)
	if err != nil {
		return err
	}
	b.targets = append(b.targets, &target{name: "ebbfs", dir: l.mnt, srv: eb, sock: filepath.Join(l.cache, "admin.sock"), cache: l.cache,
		segs: filepath.Join(l.store, "segments"), layout: l})

	if b.o.s3 {
		storage, err := startS3(filepath.Join(b.work, "s3"), b.o.s3MD5ETags)
		if err != nil {
			return err
		}
		l, err := setupEbbfs(bin, filepath.Join(b.work, "ebbfs-s3"), storage, b.o.s3DiskCache)
		if err != nil {
			return err
		}
		eb, err := startEbbfs(l)
		if err != nil {
			return err
		}
		b.targets = append(b.targets, &target{name: "ebbfs-s3", dir: l.mnt, srv: eb, sock: filepath.Join(l.cache, "admin.sock"), cache: l.cache,
			segs: s3SegmentsDir(), layout: l})
	}

	if b.o.extentSize != 0 {
		for _, t := range b.targets {
			if t.segs == "" {
				continue
			}
			if err := unix.Setxattr(t.dir, "user.ebbfs.extent_size", []byte(strconv.Itoa(b.o.extentSize)), 0); err != nil {
				return fmt.Errorf("%s: setting the extent size: %w", t.name, err)
			}
		}
	}
	b.runGroups()

	// Peak RSS before the servers stop; then the clean stop (umount,
	// final barrier, exit 0), ebbfs first.
	var stopErrs []error
	for i := len(b.targets) - 1; i >= 0; i-- {
		t := b.targets[i]
		if t.srv == nil {
			continue
		}
		if hwm, rss, err := memStatus(t.srv.pid()); err == nil {
			t.hwm, t.rss = max(hwm, t.hwmOld), rss
		}
		if t.cache != "" {
			t.frames = dirBytes(filepath.Join(t.cache, "frames"))
		}
		t.stop, t.stopE = t.srv.stop(5 * time.Minute)
		if t.stopE != nil {
			stopErrs = append(stopErrs, t.stopE)
		}
	}
	stopS3() // after ebbfs-s3's final barrier
	b.loads = append(b.loads, loadAvg())
	b.report(os.Stdout)
	if n := b.failures(); n > 0 {
		return fmt.Errorf("%d measurement(s) failed (see the table)", n)
	}
	if len(stopErrs) > 0 {
		return stopErrs[0]
	}
	return nil
}

// measure runs f on t and records it under key, with the server's CPU
// time, block I/O and peak RSS and, for ebbfs, the store traffic.
func (b *bench) measure(key string, t *target, f func() (float64, error)) {
	b.measureTry(key, t, f, false)
}

// measureTry is measure; with retry the result replaces this round's last
// one for key and t.
func (b *bench) measureTry(key string, t *target, f func() (float64, error), retry bool) result {
	if aborting.Load() {
		select {} // the aborting goroutine cleans up and exits
	}
	var before storeCounters
	var scrapeErr error
	if t.sock != "" {
		before, scrapeErr = scrapeStore(t.sock)
	}
	cpu0 := time.Duration(-1)
	var io0 *ioCounters
	if t.srv != nil {
		if c, err := cpuTime(t.srv.pid()); err == nil {
			cpu0 = c
		}
		if rd, wr, err := procIO(t.srv.pid()); err == nil {
			io0 = &ioCounters{rd, wr}
		}
	}
	var profWait func() error
	prof := ""
	if b.o.cpuProfile != "" && t.sock != "" && (key == "seqwrite" || key == "coldread" || key == "rand4k" || key == "overwrite") {
		prof = filepath.Join(b.o.cpuProfile, fmt.Sprintf("%s-%s-r%d.pprof", t.name, key, len(b.all[key][t.name])+1))
		profWait = profileCPU(t.sock, prof, b.o.profileSeconds)
		time.Sleep(100 * time.Millisecond) // let the profile start
	}
	drops0 := cacheDrops()
	start := time.Now()
	n, err := f()
	r := result{n: n, wall: time.Since(start), cpu: -1, err: err, tries: 1}
	if profWait != nil {
		if perr := profWait(); perr != nil {
			fmt.Fprintf(os.Stderr, "mountbench: CPU profile of %s %s: %v\n", t.name, key, perr)
		} else {
			fmt.Fprintf(os.Stderr, "mountbench: CPU profile of %s %s (first %ds): %s\n", t.name, key, b.o.profileSeconds, prof)
		}
	}
	if d := cacheDrops(); drops0 >= 0 && d >= 0 {
		r.drops = d - drops0
	}
	if cpu0 >= 0 {
		if c, err := cpuTime(t.srv.pid()); err == nil {
			r.cpu = c - cpu0
		}
	}
	if io0 != nil {
		if rd, wr, err := procIO(t.srv.pid()); err == nil {
			r.io = &ioCounters{rd - io0.rd, wr - io0.wr}
		}
	}
	if t.srv != nil {
		if hwm, _, err := memStatus(t.srv.pid()); err == nil {
			r.hwm = hwm
		}
	}
	if t.sock != "" && scrapeErr == nil {
		if after, err := scrapeStore(t.sock); err == nil {
			s := after.sub(before)
			r.store = &s
		}
	}
	if b.all[key] == nil {
		b.all[key] = map[string][]result{}
	}
	rs := b.all[key][t.name]
	if retry && len(rs) > 0 {
		r.tries = rs[len(rs)-1].tries + 1
		rs[len(rs)-1] = r
	} else {
		rs = append(rs, r)
	}
	b.all[key][t.name] = rs
	status := ""
	if err != nil {
		status = "  ERROR: " + err.Error()
	} else if r.drops > 0 {
		status = fmt.Sprintf("  (disturbed: %d page-cache drops by another process)", r.drops)
	}
	fmt.Fprintf(os.Stderr, "  %-12s %-40s %s%s\n", t.name, b.label(key), formatValue(key, r), status)
	return r
}

// runGroups runs every workload on every target. Each group runs on one
// target after the other; what must follow a cache drop directly (cold,
// then warm reads) stays within one target's turn, since dropping caches
// is global.
func (b *bench) runGroups() {
	var groups []struct {
		name string
		f    func(*target)
	}
	for _, g := range []struct {
		flag, name string
		f          func(*target)
	}{
		{"overwrite", "random overwrites", b.overwriteGroup},
		{"fsync", "4 KiB write+fsync loop", b.fsyncGroup},
		{"write", "sequential write", b.writeGroup},
		{"read", "sequential reads", b.readGroup},
		{"rand", "random reads", b.randGroup},
		{"small", "small files", b.smallGroup},
		{"db", "databases and ext4 on NBD", b.dbGroup},
	} {
		if b.o.groups[g.flag] {
			groups = append(groups, struct {
				name string
				f    func(*target)
			}{g.name, g.f})
		}
	}
	for round := 0; round < b.o.rounds; round++ {
		// Each round starts with another target, so that none always
		// runs first (or right after the same neighbour's writeback).
		n := len(b.targets)
		order := make([]*target, 0, n)
		for i := range b.targets {
			order = append(order, b.targets[(i+round)%n])
		}
		for _, g := range groups {
			if round > 0 && g.name == "sequential write" {
				for _, t := range b.targets {
					if err := os.Remove(t.big()); err != nil {
						fmt.Fprintf(os.Stderr, "mountbench: %v\n", err)
					}
				}
			}
			fmt.Fprintf(os.Stderr, "mountbench: round %d/%d, %s (load average %s)\n", round+1, b.o.rounds, g.name, loadAvgLine())
			for _, t := range order {
				syscall.Sync() // the previous target's writeback is not this one's cost
				g.f(t)
			}
			b.loads = append(b.loads, loadAvg())
		}
	}
	b.res = medians(b.all)
}

// medians picks, for every workload and target, the round with the median
// result; a failed round wins, so that failures show.
func medians(all map[string]map[string][]result) map[string]map[string]result {
	out := map[string]map[string]result{}
	for key, m := range all {
		out[key] = map[string]result{}
		for name, rs := range m {
			ok := make([]result, 0, len(rs))
			for _, r := range rs {
				if r.err != nil {
					out[key][name] = r
					break
				}
				ok = append(ok, r)
			}
			if _, failed := out[key][name]; failed || len(ok) == 0 {
				continue
			}
			slices.SortFunc(ok, func(a, b result) int { return cmp.Compare(a.n, b.n) })
			out[key][name] = ok[(len(ok)-1)/2]
		}
	}
	return out
}

func (b *bench) writeGroup(t *target) {
	b.measure("seqwrite", t, func() (float64, error) { return seqWrite(b.pat, t.big(), b.o.size) })
}

func (b *bench) readGroup(t *target) {
	fail := func(err error) {
		for _, k := range []string{"coldread", "warmfd", "warmopen"} {
			b.measure(k, t, func() (float64, error) { return 0, err })
		}
	}
	if b.o.s3EmptyCache && t.name == "ebbfs-s3" {
		frames := filepath.Join(t.cache, "frames")
		if err := b.restart(t, func() error { return os.RemoveAll(frames) }); err != nil {
			fail(err)
			return
		}
	}
	if err := dropCaches(); err != nil {
		fail(err)
		return
	}
	f, err := os.Open(t.big())
	if err != nil {
		fail(err)
		return
	}
	b.measure("coldread", t, func() (float64, error) { return seqRead(b.pat, f, b.o.size, true) })
	b.measureWarm("warmfd", t, func() (float64, error) { return seqRead(b.pat, f, b.o.size, false) })
	f.Close()
	b.measureWarm("warmopen", t, func() (float64, error) {
		f, err := os.Open(t.big())
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return seqRead(b.pat, f, b.o.size, false)
	})
}

// warmTries bounds the attempts at a warm read that another process's
// cache drop disturbed.
const warmTries = 3

// measureWarm repeats a warm read while another process dropped the page
// cache during it (each attempt re-warms the cache); the last attempt is
// kept and flagged if it was disturbed too.
func (b *bench) measureWarm(key string, t *target, f func() (float64, error)) {
	for i := 0; i < warmTries; i++ {
		if r := b.measureTry(key, t, f, i > 0); r.err != nil || r.drops == 0 {
			return
		}
	}
}

func (b *bench) randGroup(t *target) {
	offs := randOffsets(b.o.seed, b.o.size, b.o.randReads)
	b.randCold(t, "rand4k", func() (float64, error) { return randRead(b.pat, t.big(), offs, 1) })
	b.randCold(t, "rand4k16", func() (float64, error) { return randRead(b.pat, t.big(), offs, 16) })
}

// randCold measures random reads f under key from a cold start: an ebbfs
// target is stopped and mounted again first (with -s3-empty-cache,
// ebbfs-s3's disk cache emptied meanwhile), and the page cache dropped.
func (b *bench) randCold(t *target, key string, f func() (float64, error)) {
	if t.layout != nil {
		// Cold means a new process too: nothing in ebbfs's memory, only
		// what its disk cache kept across the restart.
		var between func() error
		if b.o.s3EmptyCache && t.name == "ebbfs-s3" {
			frames := filepath.Join(t.cache, "frames")
			between = func() error { return os.RemoveAll(frames) }
		}
		if err := b.restart(t, between); err != nil {
			b.measure(key, t, func() (float64, error) { return 0, err })
			return
		}
	}
	if err := dropCaches(); err != nil {
		b.measure(key, t, func() (float64, error) { return 0, err })
		return
	}
	b.measure(key, t, f)
}

// remount stops ebbfs cleanly and mounts it again on the same cache
// directory.
func (b *bench) remount(t *target) error { return b.restart(t, nil) }

// restart is remount, calling between (if set) while ebbfs is stopped.
func (b *bench) restart(t *target, between func() error) error {
	if hwm, _, err := memStatus(t.srv.pid()); err == nil {
		t.hwmOld = max(t.hwmOld, hwm)
	}
	if _, err := t.srv.stop(5 * time.Minute); err != nil {
		return fmt.Errorf("remount: %w", err)
	}
	if between != nil {
		if err := between(); err != nil {
			return fmt.Errorf("remount: %w", err)
		}
	}
	srv, err := startEbbfs(t.layout)
	if err != nil {
		return fmt.Errorf("remount: %w", err)
	}
	t.srv = srv
	return nil
}

func (b *bench) smallGroup(t *target) {
	dir := filepath.Join(t.dir, "small")
	b.measure("create", t, func() (float64, error) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return 0, err
		}
		return createFiles(b.pat, dir, b.o.files)
	})
	if err := dropCaches(); err != nil {
		b.measure("stat", t, func() (float64, error) { return 0, err })
	} else {
		b.measure("stat", t, func() (float64, error) { return statFiles(dir, b.o.files) })
	}
	b.measure("delete", t, func() (float64, error) {
		n, err := deleteFiles(dir, b.o.files)
		if err == nil {
			err = os.Remove(dir)
		}
		return n, err
	})
}

func (b *bench) failures() int {
	n := 0
	for _, m := range b.all {
		for _, rs := range m {
			for _, r := range rs {
				if r.err != nil {
					n++
				}
			}
		}
	}
	return n
}
