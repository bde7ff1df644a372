package model

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The runner tests put fake spin, gcc and pan first in PATH: every run
// then finishes in milliseconds, before the runner looks at it, the case in
// which a runner trusting `wait PID` lost a job's status. A main run's
// fake pan reports an exhaustive pass; a mutant's or a finding's reports an
// error and leaves a trail. FAKE_PAN_KILL names a run (kind-name) whose
// fake pan kills the job running it, so that the run leaves no verdict.
const fakeSpin = `#!/bin/sh
if [ "$1" = -V ]; then echo "Spin Version 6.5.2 -- fake"; exit 0; fi
echo "$*" >pan.c
`

const fakeGCC = `#!/bin/sh
if [ "$1" = --version ]; then echo "gcc (fake) 0"; exit 0; fi
cat >pan <<'PAN'
#!/bin/sh
run=$(basename "$PWD")
if [ "$run" = "$FAKE_PAN_KILL" ]; then
	job=$(awk '{print $4}' /proc/$PPID/stat)
	kill -9 "$job" "$PPID"
	exit 1
fi
case "$run" in
main-*)
	echo "State-vector 100 byte, depth reached 5, errors: 0"
	echo "       10 states, stored"
	;;
*)
	echo "pan:1: assertion violated (fake) (at depth 3)"
	echo "State-vector 100 byte, depth reached 3, errors: 1"
	echo "        5 states, stored"
	echo "1:1:1" >reclaim.pml.trail
	;;
esac
PAN
chmod +x pan
`

// fakeTools writes the fake spin and gcc into a new directory and returns
// a PATH with it first.
func fakeTools(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"spin": fakeSpin, "gcc": fakeGCC} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// runFakeCheck runs check.sh on the fake tools with the given extra
// environment and returns its output and whether it exited 0.
func runFakeCheck(t *testing.T, env ...string) (string, bool) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	cmd := exec.Command("bash", "check.sh")
	cmd.Env = append(os.Environ(), "PATH="+fakeTools(t), "MODEL_ONLY=", "TMPDIR="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("check.sh: %v\n%s", err, out)
		}
	}
	return string(out), err == nil
}

// results returns the RESULT lines' "kind name" and verdicts.
func results(out string) map[string]string {
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if m := resultRE.FindStringSubmatch(line); m != nil {
			got[m[1]+" "+m[2]] = m[9]
		}
	}
	return got
}

// TestRunnerCountsFastRuns: runs that have all finished before the runner
// looks are each counted, whatever the number of parallel jobs, at both
// sizes, and the two sizes check the same runs.
func TestRunnerCountsFastRuns(t *testing.T) {
	var sizes [2]map[string]string
	for i, size := range []string{"full", "quick"} {
		for _, jobs := range []string{"1", "2", "16"} {
			out, ok := runFakeCheck(t, "MODEL_SIZE="+size, "MODEL_JOBS="+jobs)
			got := results(out)
			if !ok || !strings.Contains(out, "all as expected") {
				t.Errorf("size %s, %s jobs: check.sh failed on runs that all went as expected:\n%s", size, jobs, out)
			}
			if len(got) != 25 {
				t.Errorf("size %s, %s jobs: %d RESULT lines, want 25:\n%s", size, jobs, len(got), out)
			}
			for run, verdict := range got {
				if verdict != "ok" {
					t.Errorf("size %s, %s jobs: %s: %s, want ok", size, jobs, run, verdict)
				}
			}
			sizes[i] = got
		}
	}
	for run := range sizes[0] {
		if _, ok := sizes[1][run]; !ok {
			t.Errorf("%s is checked at the full bounds but not in the quick instances", run)
		}
	}
}

// TestRunnerFailsRunWithoutVerdict: a run killed before it writes its
// verdict makes check.sh fail and is named, though every other run is ok.
func TestRunnerFailsRunWithoutVerdict(t *testing.T) {
	out, ok := runFakeCheck(t, "MODEL_SIZE=quick", "MODEL_JOBS=2", "FAKE_PAN_KILL=mutant-drain-same-cycle")
	if ok || !strings.Contains(out, "SOME RUNS NOT AS EXPECTED") {
		t.Errorf("check.sh passed with a run that left no verdict:\n%s", out)
	}
	if !strings.Contains(out, "NO VERDICT mutant drain-same-cycle") {
		t.Errorf("check.sh did not name the run without a verdict:\n%s", out)
	}
	if got := results(out); len(got) != 24 {
		t.Errorf("%d RESULT lines, want the 24 runs that were not killed:\n%s", len(got), out)
	}
}

// TestRunnerFailsWrongResult: a mutant that passes is a failure even when
// its job exits 0.
func TestRunnerFailsWrongResult(t *testing.T) {
	out, ok := runFakeCheck(t, "MODEL_ONLY=main", "MODEL_SIZE=quick")
	if !ok {
		t.Fatalf("main runs alone: check.sh failed:\n%s", out)
	}
	// A fake pan that reports a pass for every run: the mutants and
	// findings must then be WRONG.
	path := fakeTools(t)
	dir := strings.SplitN(path, string(os.PathListSeparator), 2)[0]
	pass := strings.Replace(fakeGCC, "main-*)", "*)", 1)
	if err := os.WriteFile(filepath.Join(dir, "gcc"), []byte(pass), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "check.sh")
	cmd.Env = append(os.Environ(), "PATH="+path, "MODEL_ONLY=mutant", "MODEL_SIZE=quick", "TMPDIR="+t.TempDir())
	b, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("check.sh passed with mutants that give no counterexample:\n%s", b)
	}
	for run, verdict := range results(string(b)) {
		if verdict != "WRONG" {
			t.Errorf("%s: %s, want WRONG", run, verdict)
		}
	}
}
