// Package nbdtest holds helpers for tests of NBD over TLS: a throwaway
// certificate authority with server and client certificates, written in
// the file layout qemu's tls-creds-x509 and libnbd's tls-certificates
// expect.
package nbdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a test CA and the certificates it signed, as files in Dir:
// ca-cert.pem, server-cert.pem, server-key.pem, client-cert.pem and
// client-key.pem. The server certificate names localhost, 127.0.0.1 and
// ::1.
type PKI struct {
	Dir string
}

func (p PKI) CA() string         { return filepath.Join(p.Dir, "ca-cert.pem") }
func (p PKI) ServerCert() string { return filepath.Join(p.Dir, "server-cert.pem") }
func (p PKI) ServerKey() string  { return filepath.Join(p.Dir, "server-key.pem") }
func (p PKI) ClientCert() string { return filepath.Join(p.Dir, "client-cert.pem") }
func (p PKI) ClientKey() string  { return filepath.Join(p.Dir, "client-key.pem") }

// NewPKI makes a CA named name and its certificates in dir (created if
// missing). The certificates are valid from an hour ago for a day.
func NewPKI(dir, name string) (PKI, error) {
	p := PKI{Dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	ca := template(name+" CA", 1)
	ca.IsCA, ca.BasicConstraintsValid = true, true
	ca.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("nbdtest: CA certificate: %w", err)
	}
	if err := writePEM(p.CA(), "CERTIFICATE", caDER); err != nil {
		return p, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, err
	}
	server := template(name+" server", 2)
	server.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	server.DNSNames = []string{"localhost"}
	server.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if err := issue(server, caCert, caKey, p.ServerCert(), p.ServerKey()); err != nil {
		return p, err
	}
	client := template(name+" client", 3)
	client.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if err := issue(client, caCert, caKey, p.ClientCert(), p.ClientKey()); err != nil {
		return p, err
	}
	return p, nil
}

func template(cn string, serial int64) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"ebbfs tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
	}
}

// issue makes a key for tmpl, has the CA sign it and writes both.
func issue(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("nbdtest: certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyPath, "PRIVATE KEY", kb)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
