package tests

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// failpoints are the crash points compiled into the binary (internal/failpoint).
var failpoints = []string{
	"barrier-before-journal", "segment-before-upload", "segment-after-upload", "segment-after-commit",
	"cleaner-mid-batch",
	"cycle-after-barrier", "cycle-after-scan", "delete-after-verify", "delete-after-object-delete",
	"sweep-mid", "sweep-before-delete", "sweep-after-delete",
	"metagc-mid",
	"repack-after-upload", "repack-mid-repoint", "repack-after-repoint",
	"lsm.recover.manifest-loaded", "lsm.publish.checkpointed", "lsm.publish.tables-shipped",
	"lsm.publish.manifest-written", "lsm.barrier.journal-written",
}

// failpointExit is the status a fired failpoint exits with.
const failpointExit = 97

// crashModel tracks what must survive: the content of every file as of the
// last barrier that succeeded after its last change.
type crashModel struct {
	durable map[string][]byte // nil value: must not exist
	dirty   map[string]bool   // changed since the last successful barrier
	pending map[string][]byte
}

func newCrashModel() *crashModel {
	return &crashModel{durable: map[string][]byte{}, dirty: map[string]bool{}, pending: map[string][]byte{}}
}

func (m *crashModel) changed(name string, content []byte) {
	m.dirty[name] = true
	m.pending[name] = content
}

func (m *crashModel) barrierOK() {
	for n := range m.dirty {
		m.durable[n] = m.pending[n]
	}
	m.dirty = map[string]bool{}
}

// TestCrashAtFailpoints: for every failpoint, a writer that dies there
// (exit 97, like kill -9 at that instant) leaves a store from which a new
// writer recovers everything that was made durable, and fsck finds it
// consistent (invariants 2 and 5).
func TestCrashAtFailpoints(t *testing.T) {
	if noRun != "" {
		t.Skipf("end-to-end tests need: %s", noRun)
	}
	var mu sync.Mutex
	fired := map[string]bool{}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		var missed []string
		for _, fp := range failpoints {
			if !fired[fp] {
				missed = append(missed, fp)
			}
		}
		t.Logf("failpoints fired %d/%d; not reached by the workload: %v", len(fired), len(failpoints), missed)
		if !t.Failed() && len(fired) < len(failpoints)/2 {
			t.Errorf("only %d of %d failpoints fired: the workload no longer reaches them", len(fired), len(failpoints))
		}
	})
	for _, fp := range failpoints {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			if crashOnce(t, fp) {
				mu.Lock()
				fired[fp] = true
				mu.Unlock()
			}
		})
	}
}

// crashOnce runs the workload with fp armed, restarts, and checks. It
// reports whether fp fired.
func crashOnce(t *testing.T, fp string) bool {
	// Reclamation time runs 1000x faster: the 60 s grace takes 60 ms and the
	// 30 min metadata GC interval under 2 s.
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=1000"))
	e.init()
	m := newCrashModel()
	armed := append([]string(nil), e.extraEnv...)
	e.extraEnv = append(e.extraEnv, "EBBFS_FAILPOINT="+fp)
	p := e.start()
	e.extraEnv = armed
	if !waitMountedOrExit(p) {
		return checkCrash(t, e, p, m, fp)
	}
	alive := func() bool { return !p.exited() }
	flush := func() {
		if alive() && e.ebbfs("flush").code == 0 {
			m.barrierOK()
		}
	}
	write := func(name string, data []byte) {
		if !alive() {
			return
		}
		m.changed(name, data) // even a failed write may have landed
		_ = os.WriteFile(e.path(name), data, 0o644)
	}
	remove := func(name string) {
		if !alive() {
			return
		}
		m.changed(name, nil)
		_ = os.Remove(e.path(name))
	}
	write("a", randBytes(t, 1<<20))
	if f, err := os.OpenFile(e.path("a"), os.O_RDWR, 0); err == nil {
		if f.Sync() == nil {
			m.barrierOK()
		}
		f.Close()
	}
	write("b", randBytes(t, 2<<20))
	write("c", randBytes(t, 300<<10))
	write("e", randBytes(t, 1<<20))
	flush()
	write("a", randBytes(t, 1<<20)) // overwrite: a dead segment
	remove("b")                     // large: tombstone and cleaner; its segment keeps e: repack
	remove("c")                     // small: deleted at once
	flush()
	if alive() {
		e.ebbfs("checkpoint", "create", "--ttl", "1m", "cp")
	}
	for i := 0; i < 3 && alive(); i++ {
		e.ebbfs("reclaim", "run")
		time.Sleep(300 * time.Millisecond) // minutes of reclamation time
	}
	if alive() {
		e.ebbfs("reclaim", "sweep")
	}
	write("d", []byte("after reclamation"))
	flush()
	time.Sleep(2 * time.Second) // a metadata GC pass
	flush()
	if alive() {
		// Not reached: stop cleanly, then give recovery paths a chance.
		p.stop()
		m.barrierOK()
		e.extraEnv = append(e.extraEnv, "EBBFS_FAILPOINT="+fp)
		p = e.start()
		e.extraEnv = armed
		if waitMountedOrExit(p) {
			p.stop()
			return verifyRecovered(t, e, m, false)
		}
	}
	return checkCrash(t, e, p, m, fp)
}

// waitMountedOrExit waits until the writer mounted (true) or exited.
func waitMountedOrExit(p *proc) bool {
	deadline := time.Now().Add(mountTimeout)
	for time.Now().Before(deadline) {
		if p.exited() {
			return false
		}
		if isLiveMount(p.e.mnt) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.e.t.Fatalf("writer neither mounted nor exited within %s:\n%s", mountTimeout, p.out.String())
	return false
}

func checkCrash(t *testing.T, e *env, p *proc, m *crashModel, fp string) bool {
	t.Helper()
	code := p.wait()
	if code != failpointExit {
		t.Fatalf("writer exited %d, want %d (failpoint %s):\n%s", code, failpointExit, fp, p.out.String())
	}
	if !strings.Contains(p.out.String(), "failpoint "+fp) {
		t.Fatalf("exit %d without the failpoint's message:\n%s", code, p.out.String())
	}
	e.forceUnmount()
	return verifyRecovered(t, e, m, true)
}

// verifyRecovered restarts without failpoints and checks the model and fsck.
func verifyRecovered(t *testing.T, e *env, m *crashModel, fired bool) bool {
	t.Helper()
	p := e.mount()
	for name, want := range m.durable {
		if m.dirty[name] {
			continue
		}
		got, err := os.ReadFile(e.path(name))
		switch {
		case want == nil && err == nil:
			t.Errorf("%s was durably deleted but exists after recovery", name)
		case want == nil:
		case err != nil:
			t.Errorf("%s was durable but is unreadable after recovery: %v", name, err)
		case !bytes.Equal(got, want):
			t.Errorf("%s differs after recovery (%d bytes, want %d)", name, len(got), len(want))
		}
	}
	// The recovered writer works.
	writeFile(t, e.path("post-recovery"), []byte("ok"))
	fsyncFile(t, e.path("post-recovery"))
	p.stop()
	if r := e.ebbfs("fsck", "--verify-data"); r.code != 0 {
		t.Errorf("fsck after recovery: %s", r)
	}
	return fired
}
