package hugemem

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestBuffersOnHugePages checks that a buffer starts on a huge-page
// boundary and that, where transparent huge pages are on for madvise'd
// memory, its first 2 MiB are one huge page (/proc/self/smaps).
func TestBuffersOnHugePages(t *testing.T) {
	p := NewPool(hugeSize+(192<<10), 1, 1)
	b := p.Get()
	defer p.Put(b)
	if mapped, _, _ := p.Stats(); mapped != 1 {
		t.Fatal("the kernel refused the mapping")
	}
	addr := uintptr(unsafe.Pointer(&b[0]))
	if addr%hugeSize != 0 {
		t.Fatalf("buffer at %#x, not on a 2 MiB boundary", addr)
	}
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		msg := fmt.Sprintf("transparent huge pages are off (%q, %v)", strings.TrimSpace(string(mode)), err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + ": CI's machine must have them")
		}
		t.Skip(msg)
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	kb, err := anonHugeKB(addr)
	if err != nil {
		t.Fatal(err)
	}
	if kb < hugeSize>>10 {
		t.Fatalf("the buffer's mapping has %d KiB of huge pages, want at least %d", kb, hugeSize>>10)
	}
}

// anonHugeKB returns the AnonHugePages of the mapping holding addr.
func anonHugeKB(addr uintptr) (int, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok { // a mapping's first line: lo-hi perms ...
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uint64(addr) >= l && uint64(addr) < h
				continue
			}
		}
		if in && f[0] == "AnonHugePages:" {
			return strconv.Atoi(f[1])
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no mapping of /proc/self/smaps holds %#x", addr)
}
