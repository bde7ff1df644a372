package nbd

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/gnutls"
)

// needPSK skips a TLS-PSK test on a build without GnuTLS, and fails it in
// CI, where the build must have it.
func needPSK(t testing.TB) {
	t.Helper()
	if gnutls.Available {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test build has no TLS-PSK: build with -tags ebbfs_gnutls (libgnutls28-dev)")
	}
	t.Skip("built without the ebbfs_gnutls tag")
}

// pskDir writes keys.psk (the name qemu reads in its tls-creds-psk dir)
// with identity's key and returns the directory and the key file.
func pskDir(t testing.TB, identity string, key []byte) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "keys.psk")
	if err := os.WriteFile(file, []byte(identity+":"+hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

func randomKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// startPSKServer serves b on a loopback port that requires TLS-PSK with
// the keys in file.
func startPSKServer(t testing.TB, b Backend, file string) string {
	t.Helper()
	p, err := gnutls.NewPSKServer(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close) // after the server's own cleanup, which waits for its connections
	return serveLoopback(t, b, func(s *Server, l net.Listener) error { return s.ServePSK(l, p) })
}

func pskURI(addr, export, file, identity string) string {
	return "nbds://" + identity + "@" + addr + "/" + export + "?tls-psk-file=" + file
}

// qemuPSK returns the qemu-img/qemu-io arguments that open export as a raw
// image over NBD with TLS-PSK, with the keys.psk of dir.
func qemuPSK(t testing.TB, addr, export, dir, identity string) []string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--object", "tls-creds-psk,id=tls0,endpoint=client,dir=" + dir + ",username=" + identity, "--image-opts",
		"driver=raw,file.driver=nbd,file.server.type=inet,file.server.host=" + host +
			",file.server.port=" + port + ",file.export=" + export + ",file.tls-creds=tls0"}
}

// TestEngineClientsPSK: nbdinfo and qemu-img connect with TLS-PSK (the
// key file format they and the server share); a plain client, a wrong
// key and an unknown identity are refused, an identity added to the key
// file is accepted without a restart; qemu-io writes with FUA and
// FLUSH over TLS-PSK and reads its data back.
func TestEngineClientsPSK(t *testing.T) {
	needPSK(t)
	needTool(t, "nbdinfo")
	needTool(t, "qemu-img")
	needTool(t, "qemu-io")
	f := newEngFS(t, fs.Options{})
	const size = 64 << 20
	ino := f.mkExport("disk0", size)
	key := randomKey(t)
	dir, file := pskDir(t, "alice", key)
	addr := startPSKServer(t, f.b, file)

	if out := tool(t, "nbdinfo", "--size", pskURI(addr, "disk0", file, "alice")); strings.TrimSpace(out) != strconv.Itoa(size) {
		t.Fatalf("nbdinfo over TLS-PSK: %s", out)
	}
	args := append([]string{"info", "--output=json"}, qemuPSK(t, addr, "disk0", dir, "alice")...)
	if out := tool(t, "qemu-img", args...); !strings.Contains(out, `"virtual-size": `+strconv.Itoa(size)) {
		t.Fatalf("qemu-img info over TLS-PSK: %s", out)
	}

	wrongDir, wrongFile := pskDir(t, "alice", randomKey(t))
	bobDir, bobFile := pskDir(t, "bob", key)
	refused := map[string][]string{
		"plain nbdinfo":              {"nbdinfo", "--size", "nbd://" + addr + "/disk0"},
		"plain qemu-img":             {"qemu-img", "info", "-f", "raw", "nbd://" + addr + "/disk0"},
		"nbdinfo with a wrong key":   {"nbdinfo", "--size", pskURI(addr, "disk0", wrongFile, "alice")},
		"qemu-img with a wrong key":  append([]string{"qemu-img", "info"}, qemuPSK(t, addr, "disk0", wrongDir, "alice")...),
		"nbdinfo, unknown identity":  {"nbdinfo", "--size", pskURI(addr, "disk0", bobFile, "bob")},
		"qemu-img, unknown identity": append([]string{"qemu-img", "info"}, qemuPSK(t, addr, "disk0", bobDir, "bob")...),
	}
	for name, cmd := range refused {
		out, err := toolErr(t, cmd[0], cmd[1:]...)
		if err == nil {
			t.Errorf("%s was served:\n%s", name, out)
		}
		t.Logf("%s: refused: %s", name, strings.TrimSpace(out))
	}

	// The key file is read at each connection: an identity added to it
	// is accepted without a restart.
	f2, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f2.WriteString("bob:" + hex.EncodeToString(key) + "\n"); err != nil {
		t.Fatal(err)
	}
	f2.Close()
	if out := tool(t, "nbdinfo", "--size", pskURI(addr, "disk0", bobFile, "bob")); strings.TrimSpace(out) != strconv.Itoa(size) {
		t.Fatalf("nbdinfo as an identity added to the key file: %s", out)
	}

	// The data path: a FUA write, a plain write and a FLUSH, then read
	// back with a pattern check.
	io := append([]string{"-c", "write -f -P 51 1M 512K", "-c", "write -P 51 1536K 512K", "-c", "flush",
		"-c", "read -P 51 1M 1M"}, qemuPSK(t, addr, "disk0", dir, "alice")...)
	if out := tool(t, "qemu-io", io...); strings.Contains(out, "fail") || strings.Contains(out, "Pattern verification") {
		t.Fatalf("qemu-io over TLS-PSK:\n%s", out)
	}
	if got := readEngine(t, f.e, ino, 1<<20, 1<<20); !bytes.Equal(got, bytes.Repeat([]byte{51}, 1<<20)) {
		t.Fatal("qemu-io's writes over TLS-PSK are not in the export")
	}
	// A large read crosses many TLS records.
	if out := tool(t, "qemu-io", append([]string{"-c", "read -P 0 8M 16M"}, qemuPSK(t, addr, "disk0", dir, "alice")...)...); strings.Contains(out, "fail") || strings.Contains(out, "Pattern verification") {
		t.Fatalf("qemu-io 16 MiB read over TLS-PSK:\n%s", out)
	}
}
