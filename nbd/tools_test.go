package nbd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// These tests drive the server with real NBD clients. They skip when a tool
// is missing, unless CI=true.

func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	path := needTool(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func TestNbdinfoList(t *testing.T) {
	needTool(t, "nbdinfo")
	_, addr := startServer(t, twoExports(), Options{})
	out := runTool(t, "nbdinfo", "--list", "--json", "nbd://"+addr)
	var v struct {
		Exports []struct {
			Name string `json:"export-name"`
			Size int64  `json:"export-size"`
		} `json:"exports"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("nbdinfo output: %v\n%s", err, out)
	}
	got := fmt.Sprint(v.Exports)
	if want := fmt.Sprint([]struct {
		Name string
		Size int64
	}{{"disk", testSize}, {"other", 3 * 4096}}); got != want {
		t.Fatalf("exports %s, want %s\n%s", got, want, out)
	}
}

func TestNbdinfoFlags(t *testing.T) {
	needTool(t, "nbdinfo")
	_, addr := startServer(t, twoExports(), Options{MaxRequest: 1 << 20})
	out := runTool(t, "nbdinfo", "--json", "nbd://"+addr+"/disk")
	var v struct {
		Exports []map[string]any `json:"exports"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Exports) != 1 {
		t.Fatalf("nbdinfo output: %v\n%s", err, out)
	}
	e := v.Exports[0]
	for _, k := range []string{"can_flush", "can_trim", "can_zero", "can_multi_conn", "can_fua"} {
		if e[k] != true {
			t.Errorf("%s = %v, want true", k, e[k])
		}
	}
	if e["is_read_only"] != false {
		t.Errorf("is_read_only = %v", e["is_read_only"])
	}
	if e["export-size"] != float64(testSize) {
		t.Errorf("export-size = %v", e["export-size"])
	}
	if e["block_size_maximum"] != float64(1<<20) || e["block_size_preferred"] != float64(4096) {
		t.Errorf("block sizes %v/%v", e["block_size_preferred"], e["block_size_maximum"])
	}
	if t.Failed() {
		t.Log(out)
	}
}

func TestNbdinfoReadOnly(t *testing.T) {
	needTool(t, "nbdinfo")
	_, addr := startServer(t, twoExports(), Options{ReadOnly: true})
	out := runTool(t, "nbdinfo", "--json", "nbd://"+addr+"/disk")
	if !strings.Contains(out, `"is_read_only": true`) {
		t.Fatalf("not read-only:\n%s", out)
	}
}

// qemuIO runs qemu-io commands against url and fails on any reported error.
func qemuIO(t *testing.T, url string, cmds ...string) string {
	t.Helper()
	args := []string{"-f", "raw"}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out := runTool(t, "qemu-io", append(args, url)...)
	for _, bad := range []string{"failed", "error", "Pattern verification"} {
		if strings.Contains(strings.ToLower(out), strings.ToLower(bad)) {
			t.Fatalf("qemu-io reported %q:\n%s", bad, out)
		}
	}
	return out
}

func checkQemuState(t *testing.T, e *memExport) {
	t.Helper()
	if got := e.bytes(0, 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Error("discarded range not zero")
	}
	if got := e.bytes(4096, 4096); !bytes.Equal(got, bytes.Repeat([]byte{0xab}, 4096)) {
		t.Error("written range lost")
	}
	if got := e.bytes(8192, 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Error("write -z range not zero")
	}
	if got := e.bytes(12288, 64<<10-12288); !bytes.Equal(got, bytes.Repeat([]byte{0xab}, len(got))) {
		t.Error("written range past the zeroes lost")
	}
	var trims, zeroes int
	for _, z := range e.zeroCalls() {
		if z.trim {
			trims++
		} else {
			zeroes++
		}
	}
	if trims == 0 || zeroes == 0 {
		t.Errorf("backend saw %d trims and %d zero writes, want both", trims, zeroes)
	}
}

var qemuCmds = []string{
	"write -P 0xab 0 64k",
	"read -P 0xab 0 64k",
	"discard 0 4k",
	"read -P 0 0 4k",
	"write -z 8k 4k",
	"read -P 0 8k 4k",
	"read -P 0xab 4k 4k",
	"flush",
}

func TestQemuIO(t *testing.T) {
	needTool(t, "qemu-io")
	b := twoExports()
	_, addr := startServer(t, b, Options{})
	qemuIO(t, "nbd://"+addr+"/disk", qemuCmds...)
	checkQemuState(t, b.export("disk"))
	if b.flushes.Load() == 0 {
		t.Error("qemu-io flush did not reach the backend")
	}
	// A second connection reads what the first wrote.
	qemuIO(t, "nbd://"+addr+"/disk", "read -P 0xab 4k 4k", "read -P 0 0 4k")
}

func TestUnixSocket(t *testing.T) {
	needTool(t, "nbdinfo")
	needTool(t, "qemu-io")
	dir, err := os.MkdirTemp("", "nbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	b := twoExports()
	s := NewServer(b, Options{Logger: testLogger(t)})
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	defer func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	url := "nbd+unix:///disk?socket=" + sock
	out := runTool(t, "nbdinfo", "--json", url)
	if !strings.Contains(out, fmt.Sprintf(`"export-size": %d`, testSize)) {
		t.Fatalf("nbdinfo over unix socket:\n%s", out)
	}
	qemuIO(t, url, qemuCmds...)
	checkQemuState(t, b.export("disk"))
}

func TestNbdcopyRoundTrip(t *testing.T) {
	needTool(t, "nbdcopy")
	if testing.Short() {
		t.Skip("64 MiB copy in -short mode")
	}
	const size = 64 << 20
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := make([]byte, size)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	b := newMemBackend(map[string]int64{"big": size})
	_, addr := startServer(t, b, Options{})
	url := "nbd://" + addr + "/big"
	// nbdcopy uses several connections when CAN_MULTI_CONN is set.
	runTool(t, "nbdcopy", "--connections=4", "--flush", src, url)
	if !bytes.Equal(b.export("big").bytes(0, size), data) {
		t.Fatal("backend content differs from the source file")
	}
	if b.flushes.Load() == 0 {
		t.Error("nbdcopy did not flush")
	}
	runTool(t, "nbdcopy", "--connections=4", url, dst)
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("round-tripped file differs")
	}
	if b.opens.Load() < 2 {
		t.Errorf("only %d connections opened", b.opens.Load())
	}
}
