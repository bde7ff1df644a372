package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/lsm"
)

// haConfig is the [ha] section the standby tests use (a fenced writer
// rejoins as a standby).
const haConfig = "\n[ha]\ntakeover_after = \"5s\"\nrejoin = true\n"

const testTakeoverAfter = 5 * time.Second

// haState is the "ha" part of `ebbfs status --json`'s health.
type haState struct {
	Role               string  `json:"role"`
	Writer             string  `json:"writer"`
	Epoch              uint64  `json:"epoch"`
	SinceSignOfLifeSec float64 `json:"since_sign_of_life_seconds"`
	Armed              bool    `json:"armed"`
	Failovers          int     `json:"failovers"`
	HeartbeatEverySec  float64 `json:"heartbeat_every_seconds"`
	Rejoins            int     `json:"rejoins"`
	Standbys           []string
}

// ha reads the process's role from its admin socket's status (in
// process: no exec, so a descriptor held on a stopped writer's mount
// does not hang it); ok is false when no process answers.
func (e *env) ha() (haState, bool) {
	resp, err := e.adminClient().Get("http://ebbfs/v1/status")
	if err != nil {
		return haState{}, false
	}
	defer resp.Body.Close()
	var st struct {
		Extra struct {
			Health struct {
				HA *haState `json:"ha"`
			} `json:"health"`
		} `json:"extra"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Extra.Health.HA == nil {
		return haState{}, false
	}
	return *st.Extra.Health.HA, true
}

// waitRole waits until e's process reports role (and, for a standby,
// armed: the writer heartbeats for it).
func (e *env) waitRole(role string, timeout time.Duration) haState {
	e.t.Helper()
	var st haState
	if !testutil.Until(timeout, func() bool {
		var ok bool
		st, ok = e.ha()
		return ok && st.Role == role && (role != "standby" || st.Armed)
	}) {
		e.t.Fatalf("%s: role %+v, want %s within %s", e.mnt, st, role, timeout)
	}
	return st
}

// ackLoad writes and fsyncs small files under dir until stopped or an
// fsync fails, remembering every file whose fsync succeeded.
type ackLoad struct {
	dir  string
	mu   sync.Mutex
	acks map[string]string // name -> content, fsynced
	errs []string
	stop chan struct{}
	done chan struct{}
}

func startAckLoad(dir, tag string) *ackLoad {
	l := &ackLoad{dir: dir, acks: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			name := fmt.Sprintf("%s-%06d", tag, i)
			content := strings.Repeat(name+" ", 50+i%200)
			if err := writeSync(filepath.Join(dir, name), []byte(content)); err != nil {
				l.mu.Lock()
				l.errs = append(l.errs, err.Error())
				l.mu.Unlock()
				return
			}
			l.mu.Lock()
			l.acks[name] = content
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *ackLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// end stops the load and waits for it (a load blocked on a dead mount is
// left to the mount's abort).
func (l *ackLoad) end(t testing.TB) {
	close(l.stop)
	select {
	case <-l.done:
	case <-time.After(2 * time.Minute):
		t.Errorf("the write load did not stop within 2 minutes")
	}
}

// verify checks every acknowledged file under dir.
// checkFenced: the old writer e reports itself fenced (or, with [ha]
// rejoin, a standby that rejoined after it was fenced),
// every write the load had acknowledged is on the new writer s, and the
// files written on e after the takeover are not.
func checkFenced(t *testing.T, e, s *env, load *ackLoad) {
	t.Helper()
	if st, ok := e.ha(); !ok || st.Role != "fenced" && (st.Role != "standby" || st.Rejoins != 1) {
		t.Errorf("the old writer's role %+v, want fenced (or a standby that rejoined)", st)
	}
	load.verify(t, s.mnt)
	for _, name := range []string{"zombie", "zombie-2"} {
		if _, err := os.Stat(s.path(name)); err == nil {
			t.Errorf("%s, written on the fenced writer, is on the new writer", name)
		}
	}
}

func (l *ackLoad) verify(t testing.TB, dir string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	bad := 0
	for name, want := range l.acks {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			bad++
			if bad <= 5 {
				t.Errorf("acknowledged %s: %d bytes, %v; want %d bytes", name, len(got), err, len(want))
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d acknowledged files wrong or missing", bad, len(l.acks))
	}
}

// TestStandbyTakesOverAfterKill: SIGKILL of the writer under a
// write+fsync load; the standby is the writer within takeover_after + 5 s,
// has every write fsynced before the kill, and its own mount accepts
// writes in place (a file it had open for reading stays open).
func TestStandbyTakesOverAfterKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.writeConfig(haConfig)
	e.init()
	w := e.mount()
	writeFile(t, e.path("before"), []byte("fsynced before the standby started"))
	fsyncFile(t, e.path("before"))

	s := e.sameStore()
	s.writeConfig(haConfig)
	s.mount("--standby")
	if err := os.WriteFile(s.path("refused"), []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("a write on the standby: %v, want EROFS", err)
	}
	held, err := os.Open(s.path("before"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	load := startAckLoad(e.mnt, "w")
	st := s.waitRole("standby", time.Minute)
	testutil.Until(time.Minute, func() bool { return load.count() >= 20 })
	ws, _ := e.ha()
	t.Logf("standby armed: %+v; writer heartbeats every %.2fs for %v", st, ws.HeartbeatEverySec, ws.Standbys)

	killed := time.Now()
	w.kill()
	load.end(t)
	st = s.waitRole("writer", testTakeoverAfter+30*time.Second)
	took := time.Since(killed)
	t.Logf("the standby is the writer %.1fs after SIGKILL (takeover_after %s); %d files acknowledged before the kill", took.Seconds(), testTakeoverAfter, load.count())
	if took > testTakeoverAfter+5*time.Second {
		t.Errorf("takeover took %s, want within takeover_after + 5 s", took)
	}
	load.verify(t, s.mnt)

	buf := make([]byte, 64)
	if n, err := held.ReadAt(buf, 0); n == 0 {
		t.Fatalf("the file held open for reading across the promotion: %d bytes, %v", n, err)
	}
	writeFile(t, s.path("after"), []byte("written on the promoted standby"))
	fsyncFile(t, s.path("after"))
	if st.Failovers != 1 {
		t.Errorf("failovers %d, want 1", st.Failovers)
	}
	if err := syscall.Access(s.mnt, 2); err != nil {
		t.Fatalf("the promoted mount is not writable: %v", err)
	}
}

// TestStandbyFencesStoppedWriter: the writer stopped with SIGSTOP; a
// standby takes over; after SIGCONT the old writer's next fsync fails,
// what it wrote after the takeover is nowhere, it refuses further writes
// and says why; fsck is clean. The writer stays stopped for 20 s rather
// than 60: the takeover is over after about 6 s, and what follows
// SIGCONT (the first barrier or heartbeat finds the new epoch) does not
// depend on how long the stop lasted.
func TestStandbyFencesStoppedWriter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.writeConfig(haConfig)
	e.init()
	w := e.mount()
	s := e.sameStore()
	s.writeConfig(haConfig)
	sp := s.mount("--standby")
	// A load until the standby is armed; no descriptor on the writer's
	// mount is held across the stop (a process started meanwhile would
	// close its copy at exec and wait for the stopped daemon).
	load := startAckLoad(e.mnt, "w")
	s.waitRole("standby", time.Minute)
	testutil.Until(time.Minute, func() bool { return load.count() >= 20 })
	load.end(t)

	pid := w.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	cont := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	defer cont()
	s.waitRole("writer", testTakeoverAfter+30*time.Second)
	t.Logf("the standby is the writer %.1fs after SIGSTOP", time.Since(stopped).Seconds())
	writeFile(t, s.path("new-writer"), []byte("the new writer's"))
	fsyncFile(t, s.path("new-writer"))
	testutil.Until(time.Minute, func() bool { return time.Since(stopped) >= 20*time.Second })
	cont()

	// The zombie: its next fsync fails, and then it takes no writes.
	err := writeSync(e.path("zombie"), []byte("written by the old writer after the takeover"))
	if err == nil {
		t.Fatal("the old writer acknowledged an fsync after the takeover")
	}
	t.Logf("the old writer's fsync after SIGCONT: %v", err)
	if err := os.WriteFile(e.path("zombie-2"), []byte("x"), 0o644); err == nil {
		t.Fatal("the fenced writer still takes writes")
	}
	testutil.Eventually(t, 30*time.Second, "the old writer logs that it was fenced", func() bool {
		return strings.Contains(w.out.String(), "writer fenced")
	})
	checkFenced(t, e, s, load)
	w.kill()
	sp.stop()
	s.fsckClean()
	sp = s.mount()
	load.verify(t, s.mnt)
	for _, name := range []string{"zombie", "zombie-2"} {
		if _, err := os.Stat(s.path(name)); err == nil {
			t.Errorf("%s, written on the fenced writer, appeared after a restart", name)
		}
	}
	sp.stop()
}

// TestStandbysRaceRepeatedFailovers: a writer and two standbys; the
// writer is killed again and again (EBBFS_HA_ROUNDS times, default 20),
// each time restarted as a standby: every time exactly one of the
// others becomes the writer, the lease epoch moves by one, and every
// file fsynced on any writer is on the new one.
func TestStandbysRaceRepeatedFailovers(t *testing.T) {
	t.Parallel()
	rounds := 20
	if n := atoi(os.Getenv("EBBFS_HA_ROUNDS")); n > 0 {
		rounds = n
	}
	e := newEnv(t)
	e.writeConfig(haConfig)
	e.init()
	envs := []*env{e, e.sameStore(), e.sameStore()}
	procs := make([]*proc, 3)
	procs[0] = e.mount()
	for i := 1; i < 3; i++ {
		envs[i].writeConfig(haConfig)
		procs[i] = envs[i].mount("--standby")
	}
	acked := map[string]string{}
	writer := 0
	epoch := envs[0].waitRole("writer", time.Minute).Epoch
	start := time.Now()
	var took []float64
	for round := 1; round <= rounds; round++ {
		armAll(t, envs[writer], envs, writer)
		for k := 0; k < 5; k++ {
			name := fmt.Sprintf("r%02d-%d", round, k)
			content := strings.Repeat(name, 100+k)
			if err := writeSync(envs[writer].path(name), []byte(content)); err != nil {
				t.Fatalf("round %d: fsync on the writer: %v", round, err)
			}
			acked[name] = content
		}
		procs[writer].kill()
		killed := time.Now()
		next := -1
		if !testutil.Until(testTakeoverAfter+time.Minute, func() bool {
			writers, standbys := 0, 0
			for i := range envs {
				if i == writer {
					continue
				}
				st, ok := envs[i].ha()
				switch {
				case ok && st.Role == "writer":
					writers++
					next = i
					if st.Epoch != epoch+1 {
						t.Fatalf("round %d: the new writer's epoch %d, want %d", round, st.Epoch, epoch+1)
					}
				case ok && st.Role == "standby":
					standbys++
				case ok:
					t.Fatalf("round %d: env %d has role %+v", round, i, st)
				}
			}
			if writers > 1 {
				t.Fatalf("round %d: %d writers", round, writers)
			}
			return writers == 1 && standbys == 1
		}) {
			t.Fatalf("round %d: no single writer within %s of the kill", round, testTakeoverAfter+time.Minute)
		}
		took = append(took, time.Since(killed).Seconds())
		epoch++
		for name, want := range acked {
			got, err := os.ReadFile(envs[next].path(name))
			if err != nil || string(got) != want {
				t.Fatalf("round %d: acknowledged %s on the new writer: %d bytes, %v", round, name, len(got), err)
			}
		}
		procs[writer] = envs[writer].mount("--standby")
		writer = next
	}
	t.Logf("%d failovers in %s; takeover after the kill (s): %v", rounds, time.Since(start).Round(time.Second), took)
	for i := range envs {
		if i != writer {
			procs[i].stop()
		}
	}
	procs[writer].stop()
	envs[writer].fsckClean()
}

// TestStandbyIdleRequests: an idle writer with no standby sends nothing
// to the lease or segments/ over the window (30 s; 5 minutes with
// EBBFS_SOAK_HA); with one standby attached it sends the heartbeat (one
// conditional PUT every takeover_after/4) and nothing more. The scrapes
// that read the counts list checkpoints/ and meta/ themselves (the
// watcher's cost, README), so those spaces are reported, not asserted.
func TestStandbyIdleRequests(t *testing.T) {
	t.Parallel()
	window := 30 * time.Second
	if os.Getenv("EBBFS_SOAK_HA") != "" {
		window = 5 * time.Minute
	}
	e := newEnv(t)
	e.writeConfig(haConfig)
	e.init()
	wp := e.mount()
	writeFile(t, e.path("f"), []byte("something"))
	fsyncFile(t, e.path("f"))
	type counts struct{ lease, leasePuts, segments, meta, metaPuts, checkpoints, reclaim float64 }
	count := func(m metrics) counts {
		return counts{lease: m.sum("ebbfs_store_requests_total", `space="other"`),
			reclaim:     m.sum("ebbfs_reclaim_store_requests_total"),
			leasePuts:   m.sum("ebbfs_store_requests_total", `space="other"`, `op="put"`),
			segments:    m.sum("ebbfs_store_requests_total", `space="segments"`),
			meta:        m.sum("ebbfs_store_requests_total", `space="meta"`),
			metaPuts:    m.sum("ebbfs_store_requests_total", `space="meta"`, `op="put"`),
			checkpoints: m.sum("ebbfs_store_requests_total", `space="checkpoints"`)}
	}
	idle := func(what string) counts {
		// Let the startup's work (the first reclamation cycle, the
		// standby's announcement) end first.
		var prev counts
		testutil.Until(time.Minute, func() bool {
			c := count(e.scrapeUnix())
			same := c.segments == prev.segments && c.lease-prev.lease <= 4
			prev = c
			return same
		})
		before := count(e.scrapeUnix())
		start := time.Now()
		testutil.Until(window+time.Minute, func() bool { return time.Since(start) >= window })
		after := count(e.scrapeUnix())
		d := counts{after.lease - before.lease, after.leasePuts - before.leasePuts, after.segments - before.segments,
			after.meta - before.meta, after.metaPuts - before.metaPuts, after.checkpoints - before.checkpoints, after.reclaim - before.reclaim}
		t.Logf("idle writer %s, %s: %.0f lease requests (%.0f PUT), %.0f segments/, %.0f meta/ (%.0f PUT) and %.0f checkpoints/ (the scrapes' own listings); reclamation's: %.0f",
			what, time.Since(start).Round(time.Second), d.lease, d.leasePuts, d.segments, d.meta, d.metaPuts, d.checkpoints, d.reclaim)
		return d
	}
	d := idle("with no standby")
	if d.lease != 0 || d.segments != 0 {
		t.Errorf("an idle writer with no standby sent %.0f lease and %.0f segment requests, want 0", d.lease, d.segments)
	}

	s := e.sameStore()
	s.writeConfig(haConfig)
	sp := s.mount("--standby")
	// An idle writer hears of the standby at its next lease write; a
	// write makes it look at once. Each write is a new file: an
	// overwrite would leave dead segments, whose deletions could fall
	// due inside the window and be counted against the standby.
	wakes := 0
	testutil.Until(time.Minute, func() bool {
		wakes++
		name := e.path("wake-" + strconv.Itoa(wakes))
		writeFile(t, name, []byte("wake"))
		fsyncFile(t, name)
		st, ok := s.ha()
		return ok && st.Armed
	})
	s.waitRole("standby", time.Minute)
	d = idle("with one standby")
	beat := testTakeoverAfter / 4
	want := float64(window) / float64(beat)
	// The standby's renewal (every 5 minutes) makes the writer's next
	// heartbeat read the lease again (a HEAD and a GET, README).
	renewals := float64(window/lsm.StandbyRenewEvery) + 1
	if d.segments != 0 || d.lease-d.leasePuts > 2*renewals || d.leasePuts < want*0.8 || d.leasePuts > want+2*renewals+2 {
		t.Errorf("an idle writer with a standby sent %.0f lease requests (%.0f PUT) and %.0f segment requests (reclamation %.0f); want one PUT every %s (%.0f), the reads after the standby's renewals, and nothing else",
			d.lease, d.leasePuts, d.segments, d.reclaim, beat, want)
	}
	sp.stop()
	wp.stop()
}

// armAll waits until every standby in envs (all but envs[writer]) is
// armed, writing on the writer meanwhile: an idle writer hears of a new
// standby only at its next lease write, a busy one within 10 s.
func armAll(t *testing.T, w *env, envs []*env, writer int) {
	t.Helper()
	if !testutil.Until(2*time.Minute, func() bool {
		if err := writeSync(w.path("wake"), []byte(time.Now().String())); err != nil {
			t.Fatalf("fsync on the writer: %v", err)
		}
		for i := range envs {
			if st, ok := envs[i].ha(); i != writer && (!ok || st.Role != "standby" || !st.Armed) {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the standbys were not armed within 2 minutes")
	}
}

// TestStandbyTakesOverFromPartitionedWriter: the writer runs in its own
// network namespace and reaches the S3 test server over a veth pair; the
// link goes down for 30 s (the takeover is over after about 6 s; the
// rest of the minute changes nothing the test looks at) while an fsync
// waits on it. A standby on this host takes over; when the link is back
// the old writer's waiting fsync fails, nothing it wrote after the
// takeover is on the new writer, it refuses writes; fsck is clean. With
// [ha] rejoin, the old writer then rejoins as a standby in place: armed once the new writer heartbeats for it, it
// serves every acknowledged file and the new writer's, not its own
// unacknowledged ones, follows the new writer, refuses writes (EROFS),
// and `ebbfs promote` makes it the writer again.
func TestStandbyTakesOverFromPartitionedWriter(t *testing.T) {
	t.Parallel()
	h := newNetnsHost(t)
	srv := s3test.StartOn(t, h.hostIP)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "ha", srv.AccessKey, srv.SecretKey))
	e.writeConfig(haConfig)
	e.init()
	wp := e.startIn(h)
	s := e.sameStore()
	s.writeConfig(haConfig)
	sp := s.mount("--standby")
	load := startAckLoad(e.mnt, "w")
	armAll(t, e, []*env{e, s}, 0)
	testutil.Until(time.Minute, func() bool { return load.count() >= 20 })
	load.end(t)

	h.setLink(t, false)
	cut := time.Now()
	linkBack := func() { h.setLink(t, true) }
	// An fsync that waits on the store through the cut.
	waiting := make(chan error, 1)
	go func() { waiting <- writeSync(e.path("zombie"), []byte("written while cut off")) }()
	s.waitRole("writer", testTakeoverAfter+30*time.Second)
	t.Logf("the standby is the writer %.1fs after the cut", time.Since(cut).Seconds())
	writeFile(t, s.path("new-writer"), []byte("the new writer's"))
	fsyncFile(t, s.path("new-writer"))
	testutil.Until(time.Minute, func() bool { return time.Since(cut) >= 30*time.Second })
	linkBack()
	select {
	case err := <-waiting:
		if err == nil {
			t.Fatal("the partitioned writer acknowledged an fsync after the takeover")
		}
		t.Logf("the partitioned writer's fsync once the link was back: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the partitioned writer's fsync did not return within 2 minutes of the link coming back")
	}
	if err := os.WriteFile(e.path("zombie-2"), []byte("x"), 0o644); err == nil {
		t.Fatal("the fenced writer still takes writes")
	}
	checkFenced(t, e, s, load)

	// The rejoin: a standby following the new writer, armed once the
	// new writer heartbeats for it (a write makes it look).
	armAll(t, s, []*env{e, s}, 1)
	st := e.waitRole("standby", time.Minute)
	t.Logf("the old writer rejoined: %+v", st)
	if st.Rejoins != 1 || st.Epoch != s.waitRole("writer", time.Minute).Epoch {
		t.Errorf("the rejoined writer's status %+v: want 1 rejoin and the new writer's epoch", st)
	}
	load.verify(t, e.mnt)
	if got := string(readFile(t, e.path("new-writer"))); got != "the new writer's" {
		t.Errorf("the new writer's file on the rejoined standby: %q", got)
	}
	for _, name := range []string{"zombie", "zombie-2"} {
		if _, err := os.Stat(e.path(name)); err == nil {
			t.Errorf("%s, never acknowledged by the fenced writer, is still on its mount after the rejoin", name)
		}
	}
	writeFile(t, s.path("after-rejoin"), []byte("written after the rejoin"))
	fsyncFile(t, s.path("after-rejoin"))
	testutil.Eventually(t, time.Minute, "the rejoined standby follows the new writer", func() bool {
		b, err := os.ReadFile(e.path("after-rejoin"))
		return err == nil && string(b) == "written after the rejoin"
	})
	if err := os.WriteFile(e.path("refused"), []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("a write on the rejoined standby: %v, want EROFS", err)
	}

	// It can be promoted again (a planned switch-over).
	r := e.mustEbbfs("promote")
	t.Logf("ebbfs promote on the rejoined standby: %s", strings.TrimSpace(r.stdout))
	e.waitRole("writer", time.Minute)
	if err := writeSync(e.path("promoted-again"), []byte("the old writer's again")); err != nil {
		t.Fatalf("an fsync on the rejoined standby once promoted: %v", err)
	}
	armAll(t, e, []*env{e, s}, 0)
	testutil.Eventually(t, time.Minute, "the handed-over writer follows the promoted one", func() bool {
		b, err := os.ReadFile(s.path("promoted-again"))
		return err == nil && string(b) == "the old writer's again"
	})
	wp.stop()
	sp.stop()
	s.fsckClean()
}

// TestStandbySoak (make soak-ha; EBBFS_SOAK_HA_DURATION, default 30m):
// a writer and two standbys, each in a network namespace of its own,
// against one S3 test server; a write+fsync load runs on whichever is the
// writer, and every 1-3 minutes the writer is killed (SIGKILL), stopped
// (SIGSTOP, SIGCONT 60 s later) or cut off from the store for 60 s. A
// stopped or cut-off writer's next fsync must fail; a killed or stopped
// one is restarted as a standby, a cut-off one rejoins as a standby in
// place ([ha] rejoin). Every acknowledged write
// is verified on each new writer and at the end; fsck clean.
func TestStandbySoak(t *testing.T) {
	if os.Getenv("EBBFS_SOAK_HA") == "" {
		t.Skip("make soak-ha")
	}
	t.Parallel()
	dur := 30 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("EBBFS_SOAK_HA_DURATION")); err == nil && d > 0 {
		dur = d
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d, %s", seed, dur)
	// Each process runs in a network namespace of its own, so that
	// whichever is the writer can be cut off from the S3 server alone:
	// the server listens on the first namespace's host end, which the
	// others reach through their own veth pairs (a default route to
	// the host).
	hosts := []*netnsHost{newNetnsHost(t), newNetnsHost(t), newNetnsHost(t)}
	for _, h := range hosts[1:] {
		ipCmd(t, "-n", h.name, "route", "add", "default", "via", h.hostIP)
	}
	srv := s3test.StartOn(t, hosts[0].hostIP)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "soak", srv.AccessKey, srv.SecretKey))
	e.writeConfig(haConfig)
	e.init()
	envs := []*env{e, e.sameStore(), e.sameStore()}
	procs := []*proc{e.startIn(hosts[0]), nil, nil}
	for i := 1; i < 3; i++ {
		envs[i].writeConfig(haConfig)
		procs[i] = envs[i].startIn(hosts[i], "--standby")
	}
	acked := map[string]string{}
	writer, start, failovers := 0, time.Now(), 0
	for round := 1; time.Since(start) < dur; round++ {
		armAll(t, envs[writer], envs, writer)
		load := startAckLoad(envs[writer].mnt, fmt.Sprintf("s%03d", round))
		wait := time.Minute + time.Duration(rng.Int64N(int64(2*time.Minute)))
		began := time.Now()
		testutil.Until(wait+time.Minute, func() bool { return time.Since(began) >= wait })
		how := []string{"SIGKILL", "SIGSTOP", "partition"}[rng.IntN(3)]
		pid := procs[writer].cmd.Process.Pid
		cut := time.Now()
		switch how {
		case "SIGSTOP":
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		case "SIGKILL":
			procs[writer].kill()
		case "partition":
			hosts[writer].setLink(t, false)
		}
		next := -1
		if !testutil.Until(testTakeoverAfter+time.Minute, func() bool {
			n := 0
			for i := range envs {
				if st, ok := envs[i].ha(); i != writer && ok && st.Role == "writer" {
					n++
					next = i
				}
			}
			if n > 1 {
				t.Fatalf("round %d: %d writers", round, n)
			}
			return n == 1
		}) {
			t.Fatalf("round %d: no standby took over", round)
		}
		failovers++
		// A stop or a cut lasts 60 s (the figure; the tests in
		// make test keep them shorter): the old writer's fsyncs wait
		// meanwhile and must fail once it runs or reaches the store.
		if how != "SIGKILL" {
			testutil.Until(2*time.Minute, func() bool { return time.Since(cut) >= time.Minute })
		}
		switch how {
		case "SIGSTOP":
			_ = syscall.Kill(pid, syscall.SIGCONT)
		case "partition":
			hosts[writer].setLink(t, true)
		}
		load.end(t)
		zombie := fmt.Sprintf("zombie-%03d", round)
		if how != "SIGKILL" {
			// Its pending fsync may have had nothing left to make
			// durable; a new one must fail.
			if err := writeSync(envs[writer].path(zombie), []byte("after the takeover")); err == nil {
				t.Fatalf("round %d: the old writer acknowledged an fsync after the takeover (%s)", round, how)
			}
		}
		if _, err := os.Stat(envs[next].path(zombie)); err == nil {
			t.Fatalf("round %d: %s, written on the fenced writer, is on the new writer", round, zombie)
		}
		for k, v := range load.acks {
			acked[k] = v
		}
		all := &ackLoad{acks: acked}
		all.verify(t, envs[next].mnt)
		if how == "partition" {
			// [ha] rejoin: the old writer turns into a standby in place.
			envs[writer].waitRole("standby", 2*time.Minute)
		} else {
			procs[writer].kill()
			procs[writer] = envs[writer].startIn(hosts[writer], "--standby")
		}
		t.Logf("round %d: %s of the writer, round over %.1fs after it; %d files acknowledged in all, all on the new writer", round, how, time.Since(cut).Seconds(), len(acked))
		writer = next
	}
	for i := range envs {
		if i != writer {
			procs[i].stop()
		}
	}
	procs[writer].stop()
	envs[writer].fsckClean()
	t.Logf("%d failovers in %s, %d acknowledged files verified, fsck clean", failovers, time.Since(start).Round(time.Second), len(acked))
}

// TestPromoteUnderLoad: a planned `ebbfs promote` while a write+fsync load
// runs on the standby's mount: the load gets EROFS until the switch and
// never a failed fsync afterwards; the old writer hands over (nothing it
// acknowledged is lost, including a file written without fsync before
// the request) and goes on as a standby, armed for the new writer, that
// follows it; the switch's length is reported.
func TestPromoteUnderLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.writeConfig(haConfig)
	e.init()
	wp := e.mount()
	s := e.sameStore()
	s.writeConfig(haConfig)
	sp := s.mount("--standby")
	armAll(t, e, []*env{e, s}, 0)
	wload := startAckLoad(e.mnt, "w")
	testutil.Until(time.Minute, func() bool { return wload.count() >= 20 })
	writeFile(t, e.path("unsynced"), []byte("written on the old writer, never fsynced"))

	// The load on the standby's mount: EROFS until the switch, then
	// every fsync must succeed.
	type outcome struct {
		erofs, failedAfter, acked int
		firstErr                  string
	}
	var mu sync.Mutex
	var res outcome
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		promoted := false
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := writeSync(s.path(fmt.Sprintf("s-%06d", i)), []byte(strings.Repeat("x", 100+i%300)))
			mu.Lock()
			switch {
			case err == nil:
				promoted = true
				res.acked++
			case !promoted && strings.Contains(err.Error(), "read-only"):
				res.erofs++
			default:
				res.failedAfter++
				if res.firstErr == "" {
					res.firstErr = err.Error()
				}
			}
			mu.Unlock()
			if !promoted {
				time.Sleep(10 * time.Millisecond) // pace the EROFS retries
			}
		}
	}()
	r := s.mustEbbfs("promote")
	t.Logf("ebbfs promote: %s", strings.TrimSpace(r.stdout))
	wload.end(t)
	testutil.Until(time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return res.acked >= 20
	})
	close(stop)
	<-done
	t.Logf("load on the standby's mount: %d EROFS before the switch, %d fsyncs acknowledged after, %d failed after (%s)", res.erofs, res.acked, res.failedAfter, res.firstErr)
	if res.failedAfter != 0 || res.acked == 0 {
		t.Fatalf("after the switch: %d failed writes (%s), %d acknowledged", res.failedAfter, res.firstErr, res.acked)
	}
	if st, _ := s.ha(); st.Role != "writer" {
		t.Fatalf("the promoted standby's role %+v", st)
	}
	wload.verify(t, s.mnt)
	if got := string(readFile(t, s.path("unsynced"))); got != "written on the old writer, never fsynced" {
		t.Fatalf("the old writer's unsynced file on the new writer: %q", got)
	}
	old := e.waitRole("standby", time.Minute)
	t.Logf("the old writer: %+v", old)
	writeFile(t, s.path("followed"), []byte("the new writer's"))
	fsyncFile(t, s.path("followed"))
	testutil.Eventually(t, time.Minute, "the old writer follows the new one", func() bool {
		b, err := os.ReadFile(e.path("followed"))
		return err == nil && string(b) == "the new writer's"
	})
	if err := os.WriteFile(e.path("refused"), []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("a write on the old writer after the handover: %v, want EROFS", err)
	}
	wp.stop()
	sp.stop()
	s.fsckClean()
}
