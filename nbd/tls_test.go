package nbd

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"

	"ebbfs.dev/ebbfs/nbd/nbdtest"
)

// newPKI makes a test CA with server and client certificates.
func newPKI(t testing.TB, name string) nbdtest.PKI {
	t.Helper()
	p, err := nbdtest.NewPKI(filepath.Join(t.TempDir(), name), name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startTLSServer serves b on a loopback port that requires TLS.
func startTLSServer(t testing.TB, b Backend, files nbdtest.PKI, clientCA bool) string {
	t.Helper()
	tf := TLSFiles{Cert: files.ServerCert(), Key: files.ServerKey()}
	if clientCA {
		tf.ClientCA = files.CA()
	}
	cfg, err := LoadTLSConfig(tf)
	if err != nil {
		t.Fatal(err)
	}
	return serveLoopback(t, b, func(s *Server, l net.Listener) error { return s.ServeTLS(l, cfg) })
}

// serveLoopback serves b with serve on a loopback port until the test
// ends, and returns the port's address.
func serveLoopback(t testing.TB, b Backend, serve func(*Server, net.Listener) error) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(b, Options{Logger: testLogger(t)})
	done := make(chan error, 1)
	go func() { done <- serve(s, l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return l.Addr().String()
}

// clientTLS is a client configuration trusting ca, with the client
// certificate of withCert when it is set.
func clientTLS(t testing.TB, ca nbdtest.PKI, withCert *nbdtest.PKI) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(ca.CA())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	if withCert != nil {
		c, err := tls.LoadX509KeyPair(withCert.ClientCert(), withCert.ClientKey())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

// startTLS sends NBD_OPT_STARTTLS and runs the client handshake; on
// success the client talks TLS from then on.
func (c *testClient) startTLS(cfg *tls.Config) error {
	c.t.Helper()
	c.sendOpt(optStartTLS, nil)
	r, err := c.readOptReply()
	if err != nil || r.typ != repAck {
		c.t.Fatalf("STARTTLS: %+v %v", r, err)
	}
	tc := tls.Client(c.nc, cfg)
	if err := tc.Handshake(); err != nil {
		return err
	}
	c.nc, c.br = tc, bufio.NewReader(tc)
	return nil
}

func TestTLSRequired(t *testing.T) {
	b := twoExports()
	p := newPKI(t, "good")
	addr := startTLSServer(t, b, p, false)

	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	for _, opt := range []uint32{optList, optStructuredReply, optListMetaContext, optInfo, optGo} {
		c.sendOpt(opt, goData("disk"))
		if r, err := c.readOptReply(); err != nil || r.typ != repErrTLSReqd {
			t.Fatalf("option %d before STARTTLS: %+v %v", opt, r, err)
		}
	}
	if err := c.startTLS(clientTLS(t, p, nil)); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	c.sendOpt(optStartTLS, nil)
	if r, err := c.readOptReply(); err != nil || r.typ != repErrInvalid {
		t.Fatalf("second STARTTLS: %+v %v", r, err)
	}
	c.sendOpt(optStructuredReply, nil)
	if r, err := c.readOptReply(); err != nil || r.typ != repAck {
		t.Fatalf("STRUCTURED_REPLY over TLS: %+v %v", r, err)
	}
	if res := c.infoGo(optGo, "disk"); res.errType != 0 || res.size != testSize {
		t.Fatalf("GO over TLS: %+v", res)
	}
	payload := bytes.Repeat([]byte("tls!"), 1024)
	if e := chunkErrno(t, c.structuredCmd(cmdWrite, cmdFlagFUA, 8192, uint32(len(payload)), payload)); e != 0 {
		t.Fatalf("WRITE+FUA over TLS: errno %d", e)
	}
	if e := chunkErrno(t, c.structuredCmd(cmdFlush, 0, 0, 0, nil)); e != 0 {
		t.Fatalf("FLUSH over TLS: errno %d", e)
	}
	got, _ := readChunks(t, c.structuredCmd(cmdRead, 0, 8192, uint32(len(payload)), nil), 8192, uint32(len(payload)))
	if !bytes.Equal(got, payload) || !bytes.Equal(b.export("disk").bytes(8192, int64(len(payload))), payload) {
		t.Fatal("data written over TLS does not read back")
	}
	if b.flushes.Load() != 2 {
		t.Fatalf("%d flushes, want 2 (FUA and FLUSH)", b.flushes.Load())
	}
}

func TestTLSRefusals(t *testing.T) {
	b := twoExports()
	p := newPKI(t, "good")
	other := newPKI(t, "other")
	addr := startTLSServer(t, b, p, true)
	checkTLSServing := func() {
		t.Helper()
		c := dialClient(t, addr)
		c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
		if err := c.startTLS(clientTLS(t, p, &p)); err != nil {
			t.Fatalf("good client after a refusal: %v", err)
		}
		if res := c.infoGo(optGo, "disk"); res.errType != 0 {
			t.Fatalf("GO: %#x", res.errType)
		}
		if errno, _ := c.cmd(cmdRead, 0, 0, 512, nil); errno != 0 {
			t.Fatalf("READ: errno %d", errno)
		}
	}
	checkTLSServing()

	t.Run("plain EXPORT_NAME", func(t *testing.T) {
		c := dialClient(t, addr)
		c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
		c.sendOpt(optExportName, []byte("disk"))
		c.expectClosed()
	})
	t.Run("server from another CA", func(t *testing.T) {
		c := dialClient(t, addr)
		c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
		if err := c.startTLS(clientTLS(t, other, &p)); err == nil {
			t.Fatal("a client trusting another CA accepted the server")
		}
	})
	for name, cert := range map[string]*nbdtest.PKI{"client certificate from another CA": &other, "no client certificate": nil} {
		t.Run(name, func(t *testing.T) {
			c := dialClient(t, addr)
			c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
			err := c.startTLS(clientTLS(t, p, cert))
			if err == nil {
				// TLS 1.3: the client learns of the refusal on its first read.
				c.sendOpt(optList, nil)
				_, err = c.readOptReply()
			}
			if err == nil {
				t.Fatal("the server accepted the client")
			}
		})
	}
	t.Run("plain bytes after STARTTLS", func(t *testing.T) {
		c := dialClient(t, addr)
		c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
		// An attacker on the path appends plain-text options after the
		// client's STARTTLS: they must not be taken as TLS-protected.
		c.write(append(optBytes(optStartTLS, nil), optBytes(optGo, goData("disk"))...))
		if r, err := c.readOptReply(); err != nil || r.typ != repAck {
			t.Fatalf("STARTTLS: %+v %v", r, err)
		}
		c.expectClosed()
	})
	checkTLSServing()
}

func TestStartTLSWithoutTLS(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	c.sendOpt(optStartTLS, nil)
	if r, err := c.readOptReply(); err != nil || r.typ != repErrUnsup {
		t.Fatalf("STARTTLS on a plain listener: %+v %v", r, err)
	}
	if res := c.infoGo(optGo, "disk"); res.errType != 0 {
		t.Fatalf("GO after a refused STARTTLS: %#x", res.errType)
	}
}
