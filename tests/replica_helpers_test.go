package tests

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Helpers of the replica tests (replica_*_test.go).

// soakReplica: make soak-replica runs the long versions (10 min of churn,
// a 5-minute idle request count).
func soakReplica() bool { return os.Getenv("EBBFS_SOAK_REPLICA") != "" }

// Self-checking file content: a file is a sequence of 4 KiB blocks, each
// naming its file and its index and ending in the SHA-256 of the rest, so
// that a reader can verify any file it finds, at any moment of the
// writer's churn, without a model: a torn or half-applied change still
// consists of whole blocks, while a wrong frame, a hole where data should
// be, or bytes of another file or offset fail the check.
const (
	blockSize = 4096
	blockSum  = blockSize - sha256.Size
)

// fillBlock writes block idx of file id, version ver, into b.
func fillBlock(b []byte, id, idx, ver uint64) {
	binary.LittleEndian.PutUint64(b[0:], id)
	binary.LittleEndian.PutUint64(b[8:], idx)
	binary.LittleEndian.PutUint64(b[16:], ver)
	r := rand.NewChaCha8([32]byte{byte(id), byte(id >> 8), byte(idx), byte(idx >> 8), byte(ver), byte(ver >> 8), byte(ver >> 16)})
	_, _ = r.Read(b[24:blockSum])
	sum := sha256.Sum256(b[:blockSum])
	copy(b[blockSum:], sum[:])
}

// blocks returns n blocks of file id starting at index from.
func blocks(id, from uint64, n int, ver uint64) []byte {
	b := make([]byte, n*blockSize)
	for i := range n {
		fillBlock(b[i*blockSize:(i+1)*blockSize], id, from+uint64(i), ver)
	}
	return b
}

// checkContent verifies a whole file of id: whole blocks, each intact and
// in its place.
func checkContent(id uint64, data []byte) error {
	if len(data)%blockSize != 0 {
		return fmt.Errorf("size %d is not a multiple of %d", len(data), blockSize)
	}
	for i := 0; i < len(data); i += blockSize {
		b := data[i : i+blockSize]
		sum := sha256.Sum256(b[:blockSum])
		if string(sum[:]) != string(b[blockSum:]) {
			return fmt.Errorf("block %d: checksum mismatch (first bytes %x)", i/blockSize, b[:24])
		}
		if gid, gidx := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]); gid != id || gidx != uint64(i/blockSize) {
			return fmt.Errorf("block %d: holds block %d of file %d", i/blockSize, gidx, gid)
		}
	}
	return nil
}

// badBlocks describes which blocks of a file that failed checkContent are
// wrong, and which of them are all zeroes, to tell a hole or a zero-filled
// read from a wrong frame.
func badBlocks(id uint64, data []byte) string {
	var bad, zero []int
	for i := 0; i+blockSize <= len(data); i += blockSize {
		b := data[i : i+blockSize]
		sum := sha256.Sum256(b[:blockSum])
		gid, gidx := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		if string(sum[:]) == string(b[blockSum:]) && gid == id && gidx == uint64(i/blockSize) {
			continue
		}
		bad = append(bad, i/blockSize)
		if allZero(b) {
			zero = append(zero, i/blockSize)
		}
	}
	return fmt.Sprintf("%d of %d blocks wrong %v, all-zero %v", len(bad), len(data)/blockSize, bad, zero)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// fileID parses the id out of a churn file name "f<id>.<gen>".
func fileID(name string) (uint64, bool) {
	if !strings.HasPrefix(name, "f") {
		return 0, false
	}
	s, _, _ := strings.Cut(name[1:], ".")
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil
}

// verifyStats counts what a verifying reader saw.
type verifyStats struct {
	mu          sync.Mutex
	files       int      // files read whole and verified
	bytes       int64    // their bytes
	gone        int      // files that vanished between listing and reading
	torn        int      // reads that ended inside a block while the size changed
	eio         int      // reads that failed with EIO
	wrong       []string // files whose content failed the check
	otherErrors []string // any other failure
}

func (v *verifyStats) String() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return fmt.Sprintf("%d files (%.1f MiB) verified, %d vanished while read, %d torn by a size change during the read, %d EIO, %d wrong, %d other errors",
		v.files, float64(v.bytes)/mib, v.gone, v.torn, v.eio, len(v.wrong), len(v.otherErrors))
}

// verifyOnce reads and checks the file at p, whose name carries its id.
func (v *verifyStats) verifyOnce(p string) {
	id, ok := fileID(filepath.Base(p))
	if !ok {
		return
	}
	data, trace, changed, err := readTraced(p)
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ESTALE):
		v.gone++
	case errors.Is(err, syscall.EIO):
		v.eio++
		v.otherErrors = append(v.otherErrors, fmt.Sprintf("%s: %v", p, err))
	case err != nil:
		v.otherErrors = append(v.otherErrors, fmt.Sprintf("%s: %v", p, err))
	default:
		whole := data[:len(data)/blockSize*blockSize]
		if changed && len(whole) < len(data) && checkContent(id, whole) == nil && tailHeld(id, uint64(len(whole)/blockSize), data[len(whole):]) {
			// The file changed size during the read, which took more
			// than one read(2): the last one ended inside a block, whose
			// bytes it did hold (a torn read, as on any filesystem).
			v.torn++
			data = whole
		}
		if cerr := checkContent(id, data); cerr != nil {
			v.wrong = append(v.wrong, fmt.Sprintf("%s (%d bytes): %v; %s; %s; %s", p, len(data), cerr, badBlocks(id, data), trace, reread(p, id)))
			return
		}
		v.files++
		v.bytes += int64(len(data))
	}
}

// tailHeld reports whether tail, the start of block idx of file id, is
// bytes such a block holds: its header (id, index, version) and, as far
// as it goes, the content that version of the block has.
func tailHeld(id, idx uint64, tail []byte) bool {
	if len(tail) >= blockSize {
		return false
	}
	want := make([]byte, blockSize)
	var ver uint64
	if len(tail) >= 24 {
		ver = binary.LittleEndian.Uint64(tail[16:])
	}
	fillBlock(want, id, idx, ver)
	n := len(tail)
	if n < 24 {
		n = min(n, 16) // the version is not all there: check id and index
	}
	return string(tail[:n]) == string(want[:n])
}

// readTraced reads the file at p whole, like os.ReadFile, and says how:
// the size fstat gave before and after, and each read's offset and count.
// A wrong read is only explained with that. changed reports that the
// size fstat gives changed during the read.
func readTraced(p string) ([]byte, string, bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, "", false, err
	}
	defer f.Close()
	var tr strings.Builder
	fi, err := f.Stat()
	if err != nil {
		return nil, "", false, err
	}
	fmt.Fprintf(&tr, "fstat %d; reads", fi.Size())
	data := make([]byte, 0, fi.Size()+1)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := syscall.Pread(int(f.Fd()), data[len(data):cap(data)], int64(len(data)))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, "", false, &os.PathError{Op: "read", Path: p, Err: err}
		}
		fmt.Fprintf(&tr, " %d+%d", len(data), n)
		if n == 0 {
			break
		}
		data = data[:len(data)+n]
	}
	changed := false
	if fi2, err := f.Stat(); err == nil {
		fmt.Fprintf(&tr, "; fstat after %d", fi2.Size())
		changed = fi2.Size() != fi.Size()
	}
	return data, tr.String(), changed, nil
}

// reread reads the file at p again through the page cache and with
// O_DIRECT (the replica's own answer, no cached page), and says what each
// found.
func reread(p string, id uint64) string {
	var out []string
	if data, err := os.ReadFile(p); err != nil {
		out = append(out, fmt.Sprintf("reread: %v", err))
	} else if cerr := checkContent(id, data); cerr != nil {
		out = append(out, fmt.Sprintf("reread: %d bytes still wrong: %s", len(data), badBlocks(id, data)))
	} else {
		out = append(out, fmt.Sprintf("reread: %d bytes right", len(data)))
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return strings.Join(append(out, fmt.Sprintf("O_DIRECT: %v", err)), "; ")
	}
	defer f.Close()
	var data []byte
	buf := make([]byte, 1<<20)
	for {
		n, err := f.ReadAt(buf, int64(len(data)))
		data = append(data, buf[:n]...)
		if n == 0 || err != nil {
			break
		}
	}
	if cerr := checkContent(id, data); cerr != nil {
		out = append(out, fmt.Sprintf("O_DIRECT: %d bytes wrong: %s", len(data), badBlocks(id, data)))
	} else {
		out = append(out, fmt.Sprintf("O_DIRECT: %d bytes right", len(data)))
	}
	return strings.Join(out, "; ")
}

// verifyTree reads and checks every churn file under dir once.
func (v *verifyStats) verifyTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil // vanished while walked
		}
		if d.Type().IsRegular() {
			v.verifyOnce(p)
		}
		return nil
	})
}

// failures reports what must not have happened.
func (v *verifyStats) failures() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b strings.Builder
	for i, s := range v.wrong {
		if i == 10 {
			fmt.Fprintf(&b, "... and %d more wrong\n", len(v.wrong)-10)
			break
		}
		fmt.Fprintf(&b, "wrong bytes: %s\n", s)
	}
	for i, s := range v.otherErrors {
		if i == 10 {
			fmt.Fprintf(&b, "... and %d more errors\n", len(v.otherErrors)-10)
			break
		}
		fmt.Fprintf(&b, "error: %s\n", s)
	}
	return b.String()
}

// treeContent maps every regular file under dir (relative path) to its
// content.
func treeContent(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b)
		}
		return nil
	})
	return out, err
}

// sameTrees reports how two trees differ ("" when they do not).
func sameTrees(a, b string) string {
	ta, err := treeContent(a)
	if err != nil {
		return err.Error()
	}
	tb, err := treeContent(b)
	if err != nil {
		return err.Error()
	}
	return diffTrees(tb, ta)
}

// diffTrees reports how the tree got differs from want ("" when it does
// not), naming at most five files.
func diffTrees(got, want map[string]string) string {
	var diff []string
	for k, v := range want {
		if w, ok := got[k]; !ok {
			diff = append(diff, k+" missing")
		} else if v != w {
			diff = append(diff, fmt.Sprintf("%s differs (%d vs %d bytes)", k, len(v), len(w)))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, k+" should not exist")
		}
	}
	if len(diff) > 5 {
		diff = append(diff[:5], fmt.Sprintf("and %d more", len(diff)-5))
	}
	return strings.Join(diff, "; ")
}

// metrics is a scrape of /metrics: "name{labels}" -> value, labels in
// the order the exposition prints them.
type metrics map[string]float64

// scrapeUnix fetches /metrics through the admin unix socket in the env's
// cache directory: it works across network namespaces, where the admin
// TCP address (loopback of another namespace) does not.
func (e *env) scrapeUnix() metrics {
	e.t.Helper()
	sock := filepath.Join(e.cache, "admin.sock")
	resp, err := e.adminClient().Get("http://ebbfs/metrics")
	if err != nil {
		e.t.Fatalf("scrape %s: %v", sock, err)
	}
	defer resp.Body.Close()
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		e.t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return m
}

// adminClient talks to the writer's admin socket.
func (e *env) adminClient() *http.Client {
	sock := filepath.Join(e.cache, "admin.sock")
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}, Timeout: 30 * time.Second}
}

// goroutines is the writer's goroutine dump, for diagnosing a stall, or
// why there is none.
func (e *env) goroutines() string {
	resp, err := e.adminClient().Get("http://ebbfs/debug/pprof/goroutine?debug=2")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// sum adds the series of name whose labels include every k="v" given.
func (m metrics) sum(name string, labels ...string) float64 {
	var s float64
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(k, l) {
				ok = false
				break
			}
		}
		if ok {
			s += v
		}
	}
	return s
}

// replicaStatus is the replica part of `ebbfs status --json`.
type replicaStatus struct {
	Served   uint64  `json:"served_seq"`
	Manifest uint64  `json:"manifest"`
	Lag      float64 `json:"lag_seconds"`
	Follows  bool    `json:"follows"`
	Jumps    int     `json:"manifest_jumps"`
	Error    string  `json:"error"`
}

func (e *env) replicaStatus() replicaStatus {
	e.t.Helper()
	st := e.mustEbbfs("status", "--json")
	var s struct {
		Extra struct {
			Replica *replicaStatus `json:"replica"`
		} `json:"extra"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &s); err != nil || s.Extra.Replica == nil {
		e.t.Fatalf("replica status: %v\n%s", err, st.stdout)
	}
	return *s.Extra.Replica
}

// checkpointRecord is one row of `ebbfs checkpoint list --json`.
type checkpointRecord struct {
	Name        string    `json:"name"`
	Kind        string    `json:"kind"`
	ManifestSeq uint64    `json:"manifest_seq"`
	CreateTime  time.Time `json:"create_time"`
	ExpireTime  time.Time `json:"expire_time"`
}

// readerCheckpoints lists the reader-* checkpoint records on the store.
func (e *env) readerCheckpoints() []checkpointRecord {
	e.t.Helper()
	r := e.mustEbbfs("checkpoint", "list", "--json")
	var recs []checkpointRecord
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil {
		e.t.Fatalf("checkpoint list --json: %v\n%s", err, r.stdout)
	}
	var out []checkpointRecord
	for _, c := range recs {
		if strings.HasPrefix(c.Name, "reader-") {
			out = append(out, c)
		}
	}
	return out
}

// TestTailHeld: the check of a torn read's last partial block accepts the
// start of a real block of the file and nothing else.
func TestTailHeld(t *testing.T) {
	t.Parallel()
	b := blocks(7, 3, 1, 42)
	for _, n := range []int{1, 16, 20, 24, 100, blockSize - 1} {
		if !tailHeld(7, 3, b[:n]) {
			t.Errorf("the first %d bytes of block 3 of file 7 rejected", n)
		}
	}
	bad := append([]byte(nil), b[:100]...)
	bad[60] ^= 1
	for name, tail := range map[string][]byte{"flipped byte": bad, "zeroes": make([]byte, 100), "other index": blocks(7, 4, 1, 42)[:100], "other file": blocks(8, 3, 1, 42)[:1]} {
		if tailHeld(7, 3, tail) {
			t.Errorf("%s accepted as the start of block 3 of file 7", name)
		}
	}
}
