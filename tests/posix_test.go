package tests

import (
	"os"
	"strings"
	"testing"
)

// TestMountSourceAndRemount: the mount's source is the config file (as
// findmnt and df show it), "mount -o remount" with the same options
// succeeds and leaves the mount working, and one asking for a change fails
// with a clear message and changes nothing.
func TestMountSourceAndRemount(t *testing.T) {
	need(t, "mount", "findmnt", "df")
	e := newEnv(t)
	e.init()
	installHelper(t)
	p := e.mount()

	if r := e.run("findmnt", "-n", "-o", "SOURCE", e.mnt); r.code != 0 || strings.TrimSpace(r.stdout) != e.cfg {
		t.Fatalf("findmnt SOURCE = %q, want the config file %s (%s)", strings.TrimSpace(r.stdout), e.cfg, r)
	}
	if r := e.run("df", "--output=source", e.mnt); r.code != 0 || !strings.Contains(r.stdout, e.cfg) {
		t.Fatalf("df does not name the config file %s: %s", e.cfg, r)
	}
	// And the mount can be found by it.
	if r := e.run("findmnt", "-n", "-o", "TARGET", "--source", e.cfg); r.code != 0 || strings.TrimSpace(r.stdout) != e.mnt {
		t.Fatalf("findmnt --source %s: %s", e.cfg, r)
	}

	for _, opts := range []string{"remount", "remount,rw", "remount,nosuid,nodev,_netdev"} {
		if r := e.run("mount", "-o", opts, e.mnt); r.code != 0 {
			t.Fatalf("mount -o %s: %s", opts, r)
		}
		if !isLiveMount(e.mnt) {
			t.Fatalf("mount -o %s left no live mount", opts)
		}
		writeFile(t, e.path("after-"+opts), []byte(opts))
	}

	for _, c := range []struct{ opts, want string }{
		{"remount,ro", "from read-write to read-only"},
		{"remount,noexec", "cannot be changed"},
	} {
		r := e.run("mount", "-o", c.opts, e.mnt)
		if r.code == 0 {
			t.Fatalf("mount -o %s succeeded; want a refusal", c.opts)
		}
		if !strings.Contains(r.stderr+r.stdout, c.want) {
			t.Errorf("mount -o %s: message lacks %q: %s", c.opts, c.want, r)
		}
		// Nothing changed: still mounted read-write.
		if err := os.WriteFile(e.path("still-rw"), []byte(c.opts), 0o644); err != nil {
			t.Fatalf("after a refused mount -o %s: %v", c.opts, err)
		}
	}
	p.stop()
}
