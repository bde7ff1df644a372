package failpoint

import "testing"

func TestFiresOnNthHit(t *testing.T) {
	if !Enabled {
		t.Fatal("failpoints exist only in test builds: run the tests with -tags ebbfs_testclock (make test does)")
	}
	var fired []string
	SetAction(func(n string) { fired = append(fired, n) })
	defer Arm("")
	Arm("p=3")
	for i := 0; i < 5; i++ {
		Hit("p")
		Hit("other")
	}
	if len(fired) != 1 || fired[0] != "p" {
		t.Fatalf("fired %v, want [p] once", fired)
	}
	Arm("")
	Hit("p")
	if len(fired) != 1 {
		t.Fatal("disarmed failpoint fired")
	}
}

func BenchmarkHitDisarmed(b *testing.B) {
	Arm("")
	for i := 0; i < b.N; i++ {
		Hit("segment-after-upload")
	}
}
