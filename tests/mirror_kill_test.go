package tests

import (
	"context"
	"crypto/sha256"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
)

// withStoreURL points the store at url (a store made elsewhere).
func withStoreURL(url string) envOption {
	return func(e *env) {
		e.store = ""
		e.storage = fmt.Sprintf("url = %q\n", url)
	}
}

// TestMirrorKillResume kills the writer and a separate mirror process
// (S3 to a local directory) with SIGKILL in the middle of mirroring,
// alternately, EBBFS_MIRROR_KILLS times (4 by default, 20 in make
// soak-mirror), restarting each. At the end the mirror has converged:
// every segment and journal the source has is in the mirror, the mirror
// mounts read-only with every file as the writer left it, no segment was
// missed, and no object was copied more than once per restart of the
// mirror.
func TestMirrorKillResume(t *testing.T) {
	t.Parallel()
	kills := 4
	if n, err := strconv.Atoi(os.Getenv("EBBFS_MIRROR_KILLS")); err == nil && n > 0 {
		kills = n
	}
	srv := s3test.Start(t)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "fs", srv.AccessKey, srv.SecretKey),
		withEnvVars("EBBFS_TEST_TIME_SCALE=20", "EBBFS_TEST_READER_TTL=8m"))
	e.init()
	w := e.mount()
	dst := filepath.Join(e.dir, "mirror")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	startMirror := func() *proc {
		p := e.startSub(ebbfsBin, "mirror", "run", "--to", "file://"+dst, "--listen", listen)
		deadline := time.Now().Add(time.Minute)
		for {
			if _, err := getMirror(listen); err == nil {
				return p
			}
			if p.exited() || time.Now().After(deadline) {
				t.Fatalf("ebbfs mirror run did not come up:\n%s", p.out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	mp := startMirror()
	var outs []string
	files := map[string][32]byte{}
	rng := mrand.New(mrand.NewPCG(7, 7))
	mirrorKills := 0
	for round := range kills {
		for i := range 3 {
			b := make([]byte, (1+rng.IntN(4))<<20)
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			name := fmt.Sprintf("r%02d-%d", round, i)
			if err := writeSync(e.path(name), b); err != nil {
				t.Fatal(err)
			}
			files[name] = sha256.Sum256(b)
		}
		if round > 1 { // deletes, for reclamation
			old := fmt.Sprintf("r%02d-0", round-2)
			if err := os.Remove(e.path(old)); err != nil {
				t.Fatal(err)
			}
			delete(files, old)
		}
		// Let the mirror get into the copies, then kill one of the two.
		time.Sleep(time.Duration(100+rng.IntN(700)) * time.Millisecond) // a random point in the copying
		if round%2 == 0 {
			mp.kill()
			outs = append(outs, mp.out.String())
			mirrorKills++
			mp = startMirror()
		} else {
			w.kill()
			e.forceUnmount()
			w = e.mount()
		}
	}
	w.stop()
	src := s3Store(t, srv, "fs")
	newest := newestJournal(t, src)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := getMirror(listen)
		if err == nil && r.Journal >= newest && r.LagBytes == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror did not converge on journal %d: %+v (%v)", newest, r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The final manifest and checkpoint records are copied by the next
	// rounds; a clean stop runs none, so let one more round pass.
	stopProc(t, mp)
	outs = append(outs, mp.out.String())

	mirrorStore, err := objstore.NewLocal(dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"segments/", lsm.JournalPrefix} {
		have := listKeys(t, mirrorStore, prefix)
		for k := range listKeys(t, src, prefix) {
			if !have[k] {
				t.Errorf("the mirror lacks %s", k)
			}
		}
	}
	all := strings.Join(outs, "\n")
	if n := strings.Count(all, "deleted from the source before it was copied"); n > 0 {
		t.Errorf("%d segments were missed", n)
	}
	counts := copyCounts(outs...)
	total, extra, most := 0, 0, 0
	again := map[string]int{}
	for k, n := range counts {
		total += n
		if k == lsm.LeaseKey {
			continue
		}
		extra += n - 1
		most = max(most, n)
		if n > 1 {
			again[strings.SplitN(k, "/", 3)[0]+"/"+strings.SplitN(k+"/", "/", 3)[1]] += n - 1
		}
	}
	t.Logf("%d kills (%d of the mirror, %d of the writer): %d objects copied %d times (the lease record %d times, once per writer epoch and mirror start), %d copies again (%v), at most %d times one object",
		kills, mirrorKills, kills-mirrorKills, len(counts), total, counts[lsm.LeaseKey], extra, again, most)
	if most > 1+mirrorKills {
		t.Errorf("an object was copied %d times with %d restarts of the mirror", most, mirrorKills)
	}

	me := newEnv(t, withStoreURL("file://"+dst))
	ro := me.mount("--read-only")
	for name, sum := range files {
		b, err := os.ReadFile(me.path(name))
		if err != nil {
			t.Fatalf("%s is not in the mirror: %v", name, err)
		}
		if sha256.Sum256(b) != sum {
			t.Fatalf("%s differs in the mirror", name)
		}
	}
	ro.stop()
	if r := me.ebbfs("fsck", "--verify-data"); r.code != 0 || !strings.Contains(r.stdout, "consistent") {
		t.Fatalf("fsck --verify-data on the mirror: %s", r)
	}
}

func newestJournal(t *testing.T, s objstore.Store) uint64 {
	t.Helper()
	objs, err := objstore.ListAll(context.Background(), s, lsm.JournalPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, o := range objs {
		if v, err := strconv.ParseUint(strings.TrimPrefix(o.Key, lsm.JournalPrefix), 16, 64); err == nil {
			n = max(n, v)
		}
	}
	return n
}

// TestMirrorInWriter runs the mirror inside the writer ([mirror] to, a
// local directory): `ebbfs status` and /metrics show it, a persistent
// checkpoint and the final manifest of a clean stop reach it, and the
// mirror serves the newest state and the checkpoint.
func TestMirrorInWriter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dst := filepath.Join(e.dir, "mirror")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	e.writeConfig(fmt.Sprintf("\n[mirror]\nto = %q\n", "file://"+dst))
	e.init()
	w := e.mount()
	writeFile(t, e.path("before"), []byte("kept by the checkpoint\n"))
	fsyncFile(t, e.path("before"))
	e.mustEbbfs("checkpoint", "create", "--persistent", "keep")
	if err := os.Remove(e.path("before")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("after"), []byte("the newest state\n"))
	fsyncFile(t, e.path("after"))
	deadline := time.Now().Add(time.Minute)
	for {
		st := e.mustEbbfs("status")
		if strings.Contains(st.stdout, "mirror:") && strings.Contains(st.stdout, "behind the writer's durable state") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ebbfs status shows no mirror line:\n%s", st.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	all := jsonSchemas(t)
	checkJSONSchema(t, "status --json (with a mirror)", e.mustEbbfs("status", "--json").stdout, schemaFor(t, all, "`ebbfs status --json`"))
	if m := string(e.adminGet("/metrics")); !strings.Contains(m, "ebbfs_mirror_lag_seconds") || !strings.Contains(m, "ebbfs_mirror_copied_bytes_total") {
		t.Fatalf("/metrics lacks the mirror's series")
	}
	w.stop()

	me := newEnv(t, withStoreURL("file://"+dst))
	ro := me.mount("--read-only")
	if got := readFile(t, me.path("after")); string(got) != "the newest state\n" {
		t.Fatalf("the mirror's newest state has %q", got)
	}
	if _, err := os.Stat(me.path("before")); !os.IsNotExist(err) {
		t.Fatalf("the mirror's newest state has the deleted file (%v)", err)
	}
	ro.stop()
	ck := me.mount("--checkpoint", "keep")
	if got := readFile(t, me.path("before")); string(got) != "kept by the checkpoint\n" {
		t.Fatalf("the mirror's checkpoint has %q", got)
	}
	ck.stop()
}
