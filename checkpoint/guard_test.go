package checkpoint

import (
	"strings"
	"testing"
	"time"
)

func TestDeleteRisk(t *testing.T) {
	now := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	recs := []Record{
		{Name: "nightly", Kind: Persistent, ManifestSeq: 7, CreateTime: now.Add(-time.Hour)},
		{Name: "old", Kind: Persistent, ManifestSeq: 3, CreateTime: now.Add(-2 * time.Hour)},
		{Name: "reader-0123456789ab-serves-nightly", Kind: Ephemeral, ManifestSeq: 7, CreateTime: now.Add(-time.Minute), ExpireTime: now.Add(2 * time.Minute)},
		{Name: "reader-0123456789ac-serves-old", Kind: Ephemeral, ManifestSeq: 3, CreateTime: now.Add(-time.Hour), ExpireTime: now.Add(-time.Minute)},
		{Name: "reader-h-1", Kind: Ephemeral, ManifestSeq: 9, CreateTime: now.Add(-time.Minute), ExpireTime: now.Add(2 * time.Minute)},
		{Name: "reader-h-2", Kind: Ephemeral, ManifestSeq: 3, CreateTime: now.Add(-time.Hour), ExpireTime: now.Add(-time.Minute)},
		{Name: "pinned-too", Kind: Persistent, ManifestSeq: 9, CreateTime: now.Add(-time.Hour)},
	}
	cases := []struct {
		name, want string
	}{
		{"nightly", "served by `ebbfs run --checkpoint nightly` (its record reader-0123456789ab-serves-nightly)"},
		{"pinned-too", ""}, // a replica at its manifest does not need it
		{"old", ""},        // its reader's record expired: no reader runs
		{"reader-h-1", "running replica, standby or checkpoint reader"},
		{"reader-h-2", ""},
		{"missing", ""},
	}
	for _, tc := range cases {
		got := DeleteRisk(recs, tc.name, now)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("DeleteRisk(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestServingReaderName(t *testing.T) {
	n, ok := ServingReaderName("0123456789ab", "snap")
	if !ok || n != "reader-0123456789ab-serves-snap" {
		t.Fatalf("ServingReaderName = %q, %v", n, ok)
	}
	if s, ok := ServedBy(n); !ok || s != "snap" {
		t.Fatalf("ServedBy(%q) = %q, %v", n, s, ok)
	}
	for _, plain := range []string{"reader-myhost-0123456789ab", "reader-host-serves-x", "snap"} {
		if s, ok := ServedBy(plain); ok {
			t.Errorf("ServedBy(%q) = %q", plain, s)
		}
	}
	if _, ok := ServingReaderName("0123456789ab", strings.Repeat("x", 102)); ok {
		t.Error("a name over 128 characters accepted")
	}
}
