package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/gnutls"
	"ebbfs.dev/ebbfs/nbd/nbdtest"
)

// withNBDConfig inserts lines at the top of the config's [nbd] section.
func (e *env) withNBDConfig(lines string) {
	e.t.Helper()
	b, err := os.ReadFile(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("\n[nbd]\n")) {
		e.t.Fatal("the config has no [nbd] section")
	}
	b = bytes.Replace(b, []byte("\n[nbd]\n"), []byte("\n[nbd]\n"+lines), 1)
	if err := os.WriteFile(e.cfg, b, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// TestNBDTLS: a writer configured with a certificate serves NBD over TLS
// only: nbdinfo and qemu-img connect with X.509 certificates from a CA
// made here, plain clients and clients trusting another CA are refused,
// the data path (qemu-io writes with FUA, FLUSH) works and what it wrote
// is in the file; the unix socket stays plain. A config that would listen
// off loopback without TLS is refused.
func TestNBDTLS(t *testing.T) {
	t.Parallel()
	need(t, "nbdinfo", "qemu-img", "qemu-io", "truncate")
	e := newEnv(t)
	pki, err := nbdtest.NewPKI(filepath.Join(e.dir, "pki"), "ebbfs-e2e")
	if err != nil {
		t.Fatal(err)
	}
	other, err := nbdtest.NewPKI(filepath.Join(e.dir, "other"), "someone else")
	if err != nil {
		t.Fatal(err)
	}

	// Off loopback without TLS: refused by the config check.
	e.writeConfig("")
	public := strings.Replace(e.nbdAddr, "127.0.0.1", "0.0.0.0", 1)
	cfg := readFile(t, e.cfg)
	plain := bytes.Replace(cfg, []byte("listen = [\""+e.nbdAddr+"\"]"), []byte("listen = [\""+public+"\"]"), 1)
	if bytes.Equal(plain, cfg) {
		t.Fatal("no nbd.listen line to change")
	}
	writeFile(t, e.cfg, plain)
	if r := e.ebbfs("config"); r.code == 0 || !strings.Contains(r.stderr+r.stdout, "not loopback") {
		t.Fatalf("a plain listener on %s was accepted: %s", public, r)
	}

	e.writeConfig("")
	e.withNBDConfig("tls_cert = \"" + pki.ServerCert() + "\"\ntls_key = \"" + pki.ServerKey() + "\"\n")
	e.init()
	p := e.mount()
	const size = 64 << 20
	if r := e.run("truncate", "-s", strconv.Itoa(size), e.path(".nbd/disk0")); r.code != 0 {
		t.Fatalf("truncate: %s", r)
	}
	if !strings.Contains(p.out.String(), "nbds://"+e.nbdAddr) {
		t.Errorf("the writer does not report its TLS address nbds://%s", e.nbdAddr)
	}
	tlsURI := func(dir string) string { return "nbds://" + e.nbdAddr + "/disk0?tls-certificates=" + dir }
	if r := e.run("nbdinfo", "--size", tlsURI(pki.Dir)); r.code != 0 || strings.TrimSpace(r.stdout) != strconv.Itoa(size) {
		t.Fatalf("nbdinfo over TLS: %s", r)
	}
	host, port, _ := strings.Cut(e.nbdAddr, ":")
	qemu := func(dir string) []string {
		return []string{"--object", "tls-creds-x509,id=tls0,endpoint=client,dir=" + dir, "--image-opts",
			"driver=raw,file.driver=nbd,file.server.type=inet,file.server.host=" + host +
				",file.server.port=" + port + ",file.export=disk0,file.tls-creds=tls0"}
	}
	if r := e.run("qemu-img", append([]string{"info", "--output=json"}, qemu(pki.Dir)...)...); r.code != 0 || !strings.Contains(r.stdout, `"virtual-size": `+strconv.Itoa(size)) {
		t.Fatalf("qemu-img info over TLS: %s", r)
	}
	for name, cmd := range map[string][]string{
		"plain nbdinfo":                {"nbdinfo", "--size", "nbd://" + e.nbdAddr + "/disk0"},
		"plain qemu-img":               {"qemu-img", "info", "-f", "raw", "nbd://" + e.nbdAddr + "/disk0"},
		"nbdinfo trusting another CA":  {"nbdinfo", "--size", tlsURI(other.Dir)},
		"qemu-img trusting another CA": append([]string{"qemu-img", "info"}, qemu(other.Dir)...),
	} {
		if r := e.run(cmd[0], cmd[1:]...); r.code == 0 {
			t.Errorf("%s was served: %s", name, r)
		}
	}
	io := append([]string{"-c", "write -f -P 0x6b 4M 1M", "-c", "write -P 0x6b 5M 1M", "-c", "flush",
		"-c", "read -P 0x6b 4M 2M"}, qemu(pki.Dir)...)
	if r := e.run("qemu-io", io...); r.code != 0 || strings.Contains(r.stdout+r.stderr, "fail") || strings.Contains(r.stdout, "Pattern verification") {
		t.Fatalf("qemu-io over TLS: %s", r)
	}
	img := readFile(t, e.path(".nbd/disk0"))
	if !bytes.Equal(img[4<<20:6<<20], bytes.Repeat([]byte{0x6b}, 2<<20)) {
		t.Fatal("what qemu-io wrote over TLS is not in the file")
	}
	sock := filepath.Join(e.cache, "nbd.sock")
	if r := e.run("nbdinfo", "--size", "nbd+unix:///disk0?socket="+sock); r.code != 0 || strings.TrimSpace(r.stdout) != strconv.Itoa(size) {
		t.Fatalf("nbdinfo over the unix socket (plain): %s", r)
	}
	p.stop()
}

// TestNBDTLSPSK: a writer configured with a TLS-PSK key file serves NBD
// over TLS-PSK only: nbdinfo and qemu-img connect with the key, a plain
// client, a wrong key and an unknown identity are refused, and the data
// path (qemu-io writes with FUA, FLUSH) works. A malformed key file stops
// the writer at start with an error that names it.
func TestNBDTLSPSK(t *testing.T) {
	t.Parallel()
	need(t, "nbdinfo", "qemu-img", "qemu-io", "truncate")
	if !gnutls.Available {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test build has no TLS-PSK: build with -tags ebbfs_gnutls (libgnutls28-dev)")
		}
		t.Skip("built without the ebbfs_gnutls tag")
	}
	e := newEnv(t)
	keys := func(name, line string) string {
		dir := filepath.Join(e.dir, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "keys.psk"), []byte(line+"\n"))
		return dir
	}
	good := keys("good", "alice:"+strings.Repeat("5a", 32))
	wrong := keys("wrong", "alice:"+strings.Repeat("a5", 32))
	bob := keys("bob", "bob:"+strings.Repeat("5a", 32))
	bad := keys("bad", "alice-without-a-key")

	e.writeConfig("")
	e.withNBDConfig("tls_psk_file = \"" + filepath.Join(bad, "keys.psk") + "\"\n")
	e.init()
	p := e.start()
	select {
	case <-p.done:
	case <-time.After(mountTimeout):
		t.Fatal("a writer with a malformed TLS-PSK key file did not stop")
	}
	if out := p.out.String(); p.code == 0 || !strings.Contains(out, "tls_psk_file") || !strings.Contains(out, "line 1") {
		t.Fatalf("a malformed key file: exit %d, output:\n%s", p.code, out)
	}

	e.writeConfig("")
	e.withNBDConfig("tls_psk_file = \"" + filepath.Join(good, "keys.psk") + "\"\n")
	p = e.mount()
	const size = 64 << 20
	if r := e.run("truncate", "-s", strconv.Itoa(size), e.path(".nbd/disk0")); r.code != 0 {
		t.Fatalf("truncate: %s", r)
	}
	uri := func(user, dir string) string {
		return "nbds://" + user + "@" + e.nbdAddr + "/disk0?tls-psk-file=" + filepath.Join(dir, "keys.psk")
	}
	if r := e.run("nbdinfo", "--size", uri("alice", good)); r.code != 0 || strings.TrimSpace(r.stdout) != strconv.Itoa(size) {
		t.Fatalf("nbdinfo over TLS-PSK: %s", r)
	}
	host, port, _ := strings.Cut(e.nbdAddr, ":")
	qemu := func(user, dir string) []string {
		return []string{"--object", "tls-creds-psk,id=tls0,endpoint=client,dir=" + dir + ",username=" + user, "--image-opts",
			"driver=raw,file.driver=nbd,file.server.type=inet,file.server.host=" + host +
				",file.server.port=" + port + ",file.export=disk0,file.tls-creds=tls0"}
	}
	if r := e.run("qemu-img", append([]string{"info", "--output=json"}, qemu("alice", good)...)...); r.code != 0 || !strings.Contains(r.stdout, `"virtual-size": `+strconv.Itoa(size)) {
		t.Fatalf("qemu-img info over TLS-PSK: %s", r)
	}
	for name, cmd := range map[string][]string{
		"plain nbdinfo":              {"nbdinfo", "--size", "nbd://" + e.nbdAddr + "/disk0"},
		"plain qemu-img":             {"qemu-img", "info", "-f", "raw", "nbd://" + e.nbdAddr + "/disk0"},
		"nbdinfo with a wrong key":   {"nbdinfo", "--size", uri("alice", wrong)},
		"qemu-img with a wrong key":  append([]string{"qemu-img", "info"}, qemu("alice", wrong)...),
		"nbdinfo, unknown identity":  {"nbdinfo", "--size", uri("bob", bob)},
		"qemu-img, unknown identity": append([]string{"qemu-img", "info"}, qemu("bob", bob)...),
	} {
		if r := e.run(cmd[0], cmd[1:]...); r.code == 0 {
			t.Errorf("%s was served: %s", name, r)
		}
	}
	io := append([]string{"-c", "write -f -P 0x6c 4M 1M", "-c", "write -P 0x6c 5M 1M", "-c", "flush",
		"-c", "read -P 0x6c 4M 2M"}, qemu("alice", good)...)
	if r := e.run("qemu-io", io...); r.code != 0 || strings.Contains(r.stdout+r.stderr, "fail") || strings.Contains(r.stdout, "Pattern verification") {
		t.Fatalf("qemu-io over TLS-PSK: %s", r)
	}
	img := readFile(t, e.path(".nbd/disk0"))
	if !bytes.Equal(img[4<<20:6<<20], bytes.Repeat([]byte{0x6c}, 2<<20)) {
		t.Fatal("what qemu-io wrote over TLS-PSK is not in the file")
	}
	if !strings.Contains(p.out.String(), "identity=alice") {
		t.Errorf("the writer did not log the TLS-PSK identity of its clients")
	}
	p.stop()
}
