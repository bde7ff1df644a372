package tests

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/objstore"
)

// mirrorReply is GET /v1/mirror of `ebbfs mirror run --listen`.
type mirrorReply struct {
	LagSeconds     float64          `json:"lag_seconds"`
	LagBytes       int64            `json:"lag_bytes"`
	Journal        uint64           `json:"journal"`
	PendingDeletes int              `json:"pending_deletes"`
	CopiedObjects  int64            `json:"copied_objects"`
	CopiedBytes    int64            `json:"copied_bytes"`
	Missing        int64            `json:"missing_objects"`
	Errors         int64            `json:"errors"`
	LastError      string           `json:"last_error"`
	SourceRequests map[string]int64 `json:"source_requests"`
	MirrorRequests map[string]int64 `json:"mirror_requests"`
}

func getMirror(addr string) (mirrorReply, error) {
	var r mirrorReply
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/v1/mirror")
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("GET /v1/mirror: %s", resp.Status)
	}
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// mirrorTarget is a mirror store on a second S3 server, reached through a
// shared credentials profile of its own.
type mirrorTarget struct {
	srv    *s3test.Server
	prefix string
	listen string
}

// withMirrorProfile writes a shared credentials file with profile
// "mirror" for srv and points the processes of e at it.
func withMirrorProfile(t *testing.T, srv *s3test.Server) envOption {
	f := filepath.Join(t.TempDir(), "credentials")
	body := fmt.Sprintf("[mirror]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.AccessKey, srv.SecretKey)
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return withEnvVars("AWS_SHARED_CREDENTIALS_FILE="+f, "AWS_CONFIG_FILE="+f+".none")
}

func (m mirrorTarget) args() []string {
	return []string{"run", "--to", "s3://" + m.srv.Bucket + "/" + m.prefix, "--endpoint", m.srv.Endpoint,
		"--region", m.srv.Region, "--profile", "mirror", "--listen", m.listen}
}

// startMirror starts `ebbfs mirror run` for e into m and waits until it
// answers.
func (e *env) startMirror(m mirrorTarget) *proc {
	e.t.Helper()
	p := e.startSub(ebbfsBin, "mirror", m.args()...)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := getMirror(m.listen); err == nil {
			return p
		}
		if p.exited() || time.Now().After(deadline) {
			e.t.Fatalf("ebbfs mirror run did not come up:\n%s", p.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// s3Store opens a bucket prefix of srv directly.
func s3Store(t *testing.T, srv *s3test.Server, prefix string) objstore.Store {
	t.Helper()
	s, err := objstore.NewS3(context.Background(), objstore.S3Config{Bucket: srv.Bucket, Prefix: prefix,
		Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func listKeys(t *testing.T, s objstore.Store, prefix string) map[string]bool {
	t.Helper()
	objs, err := objstore.ListAll(context.Background(), s, prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, o := range objs {
		out[o.Key] = true
	}
	return out
}

// Self-checking 4 KiB blocks of the random writer: round, index, filler,
// and a SHA-256 of the rest in the last 32 bytes.
const mblock = 4096

func mirrorBlock(b []byte, round, index uint64) {
	binary.LittleEndian.PutUint64(b, round)
	binary.LittleEndian.PutUint64(b[8:], index)
	x := round*0x9e3779b97f4a7c15 ^ index
	for i := 16; i+8 <= mblock-32; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	sum := sha256.Sum256(b[:mblock-32])
	copy(b[mblock-32:], sum[:])
}

// mirrorBlockRound returns the round a block holds, 0 for zeroes, -1 for a
// block that is not one of ours.
func mirrorBlockRound(b []byte, index uint64) int64 {
	if slices.Equal(b, make([]byte, mblock)) {
		return 0
	}
	sum := sha256.Sum256(b[:mblock-32])
	if !slices.Equal(sum[:], b[mblock-32:]) || binary.LittleEndian.Uint64(b[8:]) != index {
		return -1
	}
	return int64(binary.LittleEndian.Uint64(b))
}

// fsyncLog records when writes were made durable.
type fsyncLog struct {
	mu    sync.Mutex
	files map[string]fileRec // sequential files alive, by name
	// random file: per block, the rounds written and when each round's
	// fsync returned.
	blockRounds [][]uint64
	roundDone   map[uint64]time.Time
	bytes       int64
}

type fileRec struct {
	sum     [32]byte
	fsynced time.Time
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

var copiedLine = regexp.MustCompile(`msg="mirror: copied" key=(\S+)`)

// copyCounts counts, over the output of every mirror process, how often
// each key was copied.
func copyCounts(outs ...string) map[string]int {
	n := map[string]int{}
	for _, o := range outs {
		for _, m := range copiedLine.FindAllStringSubmatch(o, -1) {
			n[m[1]]++
		}
	}
	return n
}
