package main

import "testing"

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"1GiB", GiB}, {"512MiB", 512 * MiB}, {"4KiB", 4 * KiB},
		{"2g", 2 * GiB}, {"64M", 64 * MiB}, {"4096", 4096}, {" 3 MiB ", 3 * MiB},
	} {
		got, err := parseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1MiB", "1.5GiB", "1TiB", "99999999999GiB"} {
		if n, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", bad, n)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{GiB: "1GiB", 256 * MiB: "256MiB", 4 * KiB: "4KiB", 1000: "1000B", GiB + MiB: "1025MiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPattern(t *testing.T) {
	p := newPattern(1)
	big := make([]byte, MiB)
	p.fill(big, 3*MiB)
	page := make([]byte, pageSize)
	for _, off := range []int64{0, pageSize, 17 * pageSize, MiB - pageSize} {
		p.fill(page, 3*MiB+off)
		if string(page) != string(big[off:off+pageSize]) {
			t.Fatalf("page at +%d differs from the same bytes of the 1 MiB block", off)
		}
	}
	other := make([]byte, pageSize)
	p.fill(other, 3*MiB+patternSize)
	if string(other) == string(big[:pageSize]) {
		t.Fatal("pages one pattern period apart are equal: the file would be dedupable")
	}
}
