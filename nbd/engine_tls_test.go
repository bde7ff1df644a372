package nbd

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/nbd/nbdtest"
)

// startEngineTLSServer serves f's backend on a loopback listener that
// requires TLS (startTLSServer).
func startEngineTLSServer(t testing.TB, f *engFS, p nbdtest.PKI, clientCA bool) string {
	t.Helper()
	return startTLSServer(t, f.b, p, clientCA)
}

// tlsURI is the libnbd URI of export over TLS with the certificates of dir.
func tlsURI(addr, export, dir string) string {
	return "nbds://" + addr + "/" + export + "?tls-certificates=" + dir
}

// qemuTLS returns the qemu-img/qemu-io arguments that open export as a raw
// image over NBD with TLS, trusting the CA in dir (and presenting its
// client certificate, if there is one).
func qemuTLS(t testing.TB, addr, export, dir string) []string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--object", "tls-creds-x509,id=tls0,endpoint=client,dir=" + dir, "--image-opts",
		"driver=raw,file.driver=nbd,file.server.type=inet,file.server.host=" + host +
			",file.server.port=" + port + ",file.export=" + export + ",file.tls-creds=tls0"}
}

// caOnly copies p's CA certificate alone into a new directory: a client
// that trusts the server but has no certificate of its own.
func caOnly(t testing.TB, p nbdtest.PKI) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca-only")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p.CA())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca-cert.pem"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEngineClientsTLS: nbdinfo and qemu-img connect with X.509 to a TLS
// listener; a plain client, a client trusting another CA and (when client
// certificates are required) a client without one are refused; qemu-io
// writes with FUA and FLUSH over TLS and reads its data back.
func TestEngineClientsTLS(t *testing.T) {
	needTool(t, "nbdinfo")
	needTool(t, "qemu-img")
	needTool(t, "qemu-io")
	f := newEngFS(t, fs.Options{})
	const size = 64 << 20
	ino := f.mkExport("disk0", size)
	p := newPKI(t, "good")
	other := newPKI(t, "other")
	for _, clientCA := range []bool{false, true} {
		t.Run("client_certs="+strconv.FormatBool(clientCA), func(t *testing.T) {
			addr := startEngineTLSServer(t, f, p, clientCA)
			if out := tool(t, "nbdinfo", "--size", tlsURI(addr, "disk0", p.Dir)); strings.TrimSpace(out) != strconv.Itoa(size) {
				t.Fatalf("nbdinfo over TLS: %s", out)
			}
			args := append([]string{"info", "--output=json"}, qemuTLS(t, addr, "disk0", p.Dir)...)
			if out := tool(t, "qemu-img", args...); !strings.Contains(out, `"virtual-size": `+strconv.Itoa(size)) {
				t.Fatalf("qemu-img info over TLS: %s", out)
			}
			refused := map[string][]string{
				"plain nbdinfo":                {"nbdinfo", "--size", "nbd://" + addr + "/disk0"},
				"nbdinfo trusting another CA":  {"nbdinfo", "--size", tlsURI(addr, "disk0", other.Dir)},
				"qemu-img trusting another CA": append([]string{"qemu-img", "info"}, qemuTLS(t, addr, "disk0", other.Dir)...),
				"plain qemu-img":               {"qemu-img", "info", "-f", "raw", "nbd://" + addr + "/disk0"},
			}
			if clientCA {
				refused["nbdinfo without a client certificate"] = []string{"nbdinfo", "--size", tlsURI(addr, "disk0", caOnly(t, p))}
				mixed := caOnly(t, p) // trusts the server, but its key is another CA's client's
				for _, name := range []string{"client-cert.pem", "client-key.pem"} {
					b, err := os.ReadFile(filepath.Join(other.Dir, name))
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(mixed, name), b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				refused["nbdinfo with another CA's client key"] = []string{"nbdinfo", "--size", tlsURI(addr, "disk0", mixed)}
			}
			for name, cmd := range refused {
				out, err := toolErr(t, cmd[0], cmd[1:]...)
				if err == nil {
					t.Errorf("%s was served:\n%s", name, out)
				}
				t.Logf("%s: refused: %s", name, strings.TrimSpace(out))
			}
			// The data path: a FUA write, a plain write and a FLUSH,
			// then read back with a pattern check.
			pat := byte(0x31)
			if clientCA {
				pat = 0x32
			}
			io := append([]string{"-c", "write -f -P " + strconv.Itoa(int(pat)) + " 1M 512K",
				"-c", "write -P " + strconv.Itoa(int(pat)) + " 1536K 512K", "-c", "flush",
				"-c", "read -P " + strconv.Itoa(int(pat)) + " 1M 1M"}, qemuTLS(t, addr, "disk0", p.Dir)...)
			if out := tool(t, "qemu-io", io...); strings.Contains(out, "fail") || strings.Contains(out, "Pattern verification") {
				t.Fatalf("qemu-io over TLS:\n%s", out)
			}
			if got := readEngine(t, f.e, ino, 1<<20, 1<<20); !bytes.Equal(got, bytes.Repeat([]byte{pat}, 1<<20)) {
				t.Fatal("qemu-io's writes over TLS are not in the export")
			}
		})
	}
}
