//go:build ebbfs_gnutls && cgo && linux

package gnutls

/*
#cgo LDFLAGS: -lgnutls
#include <stdint.h>
#include <stdlib.h>
#include <errno.h>
#include <gnutls/gnutls.h>

extern ssize_t ebbfsGnutlsPush(uintptr_t h, void *buf, size_t n);
extern ssize_t ebbfsGnutlsPull(uintptr_t h, void *buf, size_t n);

static ssize_t push(gnutls_transport_ptr_t p, const void *buf, size_t n) {
	return ebbfsGnutlsPush((uintptr_t)p, (void *)buf, n);
}
static ssize_t pull(gnutls_transport_ptr_t p, void *buf, size_t n) {
	return ebbfsGnutlsPull((uintptr_t)p, buf, n);
}
// The transport blocks (with the connection's deadlines), so there is
// always something to read once the pull function is called.
static int pull_timeout(gnutls_transport_ptr_t p, unsigned int ms) {
	return 1;
}
static void set_transport(gnutls_session_t s, uintptr_t h) {
	gnutls_transport_set_ptr(s, (gnutls_transport_ptr_t)h);
	gnutls_transport_set_push_function(s, push);
	gnutls_transport_set_pull_function(s, pull);
	gnutls_transport_set_pull_timeout_function(s, pull_timeout);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/cgo"
	"sync"
	"time"
	"unsafe"
)

// Available reports whether this build can serve TLS-PSK.
const Available = true

// priority allows TLS 1.2 and 1.3 with the PSK key exchanges, those with
// forward secrecy (ECDHE-PSK, DHE-PSK) first, as qemu and nbdkit do.
const priority = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:+ECDHE-PSK:+DHE-PSK:+PSK"

// PSKServer holds the server's PSK credentials: the key file, read by
// GnuTLS at each handshake, so a key added to it needs no restart.
type PSKServer struct {
	file string
	cred C.gnutls_psk_server_credentials_t
	prio C.gnutls_priority_t
}

// NewPSKServer checks the key file (see ParseKeyFile) and sets up the
// server credentials. Close releases them once no connection uses them.
func NewPSKServer(file string) (*PSKServer, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls-psk: %w", err)
	}
	if _, err := ParseKeyFile(b); err != nil {
		return nil, fmt.Errorf("tls-psk: %s: %w", file, err)
	}
	s := &PSKServer{file: file}
	if rc := C.gnutls_psk_allocate_server_credentials(&s.cred); rc < 0 {
		return nil, gnutlsError("allocate credentials", rc)
	}
	cfile := C.CString(file)
	defer C.free(unsafe.Pointer(cfile))
	if rc := C.gnutls_psk_set_server_credentials_file(s.cred, cfile); rc < 0 {
		C.gnutls_psk_free_server_credentials(s.cred)
		return nil, gnutlsError("key file "+file, rc)
	}
	if rc := C.gnutls_psk_set_server_known_dh_params(s.cred, C.GNUTLS_SEC_PARAM_MEDIUM); rc < 0 {
		C.gnutls_psk_free_server_credentials(s.cred)
		return nil, gnutlsError("DH parameters", rc)
	}
	cprio := C.CString(priority)
	defer C.free(unsafe.Pointer(cprio))
	if rc := C.gnutls_priority_init(&s.prio, cprio, nil); rc < 0 {
		C.gnutls_psk_free_server_credentials(s.cred)
		return nil, gnutlsError("priority "+priority, rc)
	}
	return s, nil
}

// Close frees the credentials; no handshake may be running or start.
func (s *PSKServer) Close() {
	C.gnutls_priority_deinit(s.prio)
	C.gnutls_psk_free_server_credentials(s.cred)
}

// Handshake runs the server side of a TLS-PSK handshake on raw and
// returns the connection inside TLS, and the identity the client used.
// ctx ending aborts the handshake (raw's deadlines apply too). On error
// raw is left for the caller to close.
func (s *PSKServer) Handshake(ctx context.Context, raw net.Conn) (*Conn, error) {
	c := &Conn{raw: raw}
	if rc := C.gnutls_init(&c.sess, C.GNUTLS_SERVER); rc < 0 {
		return nil, gnutlsError("init", rc)
	}
	c.handle = cgo.NewHandle(c)
	ok := false
	defer func() {
		if !ok {
			c.free()
		}
	}()
	if rc := C.gnutls_priority_set(c.sess, s.prio); rc < 0 {
		return nil, gnutlsError("priority", rc)
	}
	if rc := C.gnutls_credentials_set(c.sess, C.GNUTLS_CRD_PSK, unsafe.Pointer(s.cred)); rc < 0 {
		return nil, gnutlsError("credentials", rc)
	}
	// Timeouts come from raw's deadlines and ctx, not from GnuTLS.
	C.gnutls_handshake_set_timeout(c.sess, 0)
	C.set_transport(c.sess, C.uintptr_t(c.handle))
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Now()) })
	defer stop()
	for {
		rc := C.gnutls_handshake(c.sess)
		if rc >= 0 {
			break
		}
		if C.gnutls_error_is_fatal(rc) == 0 {
			continue
		}
		if err := c.takeIOErr(); err != nil {
			return nil, fmt.Errorf("tls-psk handshake: %w", err)
		}
		// Tell the client why (a wrong key, an unknown identity)
		// rather than only closing the connection.
		C.gnutls_alert_send_appropriate(c.sess, rc)
		return nil, gnutlsError("handshake", rc)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if u := C.gnutls_psk_server_get_username(c.sess); u != nil {
		c.identity = C.GoString(u)
	}
	ok = true
	return c, nil
}

// Conn is a server connection inside TLS-PSK. Read and Write may run at
// once (GnuTLS allows one of each); Close waits for both to return.
type Conn struct {
	raw      net.Conn
	sess     C.gnutls_session_t
	handle   cgo.Handle
	identity string

	rmu, wmu sync.Mutex // one Read, one Write at a time
	errMu    sync.Mutex
	ioErr    error // the transport's last error, for Read/Write to return

	live      sync.RWMutex // Read and Write hold it shared; free takes it
	closeOnce sync.Once
	closed    bool // under live
}

// Identity is the PSK identity (user name) the client authenticated as.
func (c *Conn) Identity() string { return c.identity }

//export ebbfsGnutlsPush
func ebbfsGnutlsPush(h C.uintptr_t, buf unsafe.Pointer, n C.size_t) C.ssize_t {
	c := cgo.Handle(h).Value().(*Conn)
	w, err := c.raw.Write(unsafe.Slice((*byte)(buf), int(n)))
	if w > 0 {
		return C.ssize_t(w)
	}
	c.setIOErr(err)
	C.gnutls_transport_set_errno(c.sess, C.EIO)
	return -1
}

//export ebbfsGnutlsPull
func ebbfsGnutlsPull(h C.uintptr_t, buf unsafe.Pointer, n C.size_t) C.ssize_t {
	c := cgo.Handle(h).Value().(*Conn)
	r, err := c.raw.Read(unsafe.Slice((*byte)(buf), int(n)))
	if r > 0 {
		return C.ssize_t(r)
	}
	if errors.Is(err, io.EOF) {
		return 0
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	c.setIOErr(err)
	C.gnutls_transport_set_errno(c.sess, C.EIO)
	return -1
}

func (c *Conn) setIOErr(err error) {
	c.errMu.Lock()
	c.ioErr = err
	c.errMu.Unlock()
}

func (c *Conn) takeIOErr() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	err := c.ioErr
	c.ioErr = nil
	return err
}

// Read reads decrypted bytes; io.EOF after the client's close_notify or
// once the connection ends (io.ErrUnexpectedEOF without close_notify).
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.live.RLock()
	defer c.live.RUnlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		rc := C.gnutls_record_recv(c.sess, unsafe.Pointer(&p[0]), C.size_t(len(p)))
		switch {
		case rc > 0:
			return int(rc), nil
		case rc == 0:
			return 0, io.EOF
		case rc == C.GNUTLS_E_PREMATURE_TERMINATION:
			return 0, io.ErrUnexpectedEOF
		case C.gnutls_error_is_fatal(C.int(rc)) == 0:
			continue // a warning alert, a refused renegotiation, EAGAIN
		}
		if err := c.takeIOErr(); err != nil {
			return 0, err
		}
		return 0, gnutlsError("read", C.int(rc))
	}
}

// Write sends p as TLS records, all of it or an error.
func (c *Conn) Write(p []byte) (int, error) {
	c.live.RLock()
	defer c.live.RUnlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	done := 0
	for done < len(p) {
		rc := C.gnutls_record_send(c.sess, unsafe.Pointer(&p[done]), C.size_t(len(p)-done))
		if rc > 0 {
			done += int(rc)
			continue
		}
		if rc == C.GNUTLS_E_AGAIN || rc == C.GNUTLS_E_INTERRUPTED {
			continue
		}
		if err := c.takeIOErr(); err != nil {
			return done, err
		}
		return done, gnutlsError("write", C.int(rc))
	}
	return done, nil
}

// Close sends close_notify (bounded by the write deadline the caller set),
// closes the raw connection, waits for Read and Write to return and frees
// the session.
func (c *Conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.wmu.TryLock() {
			C.gnutls_bye(c.sess, C.GNUTLS_SHUT_WR)
			c.wmu.Unlock()
		}
		err = c.raw.Close()
		c.free()
	})
	return err
}

// free waits out every Read and Write (the raw connection is closed or
// the handshake failed, so they return) and releases the session.
func (c *Conn) free() {
	c.live.Lock()
	defer c.live.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	C.gnutls_deinit(c.sess)
	c.handle.Delete()
}

func (c *Conn) LocalAddr() net.Addr                { return c.raw.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr               { return c.raw.RemoteAddr() }
func (c *Conn) SetDeadline(t time.Time) error      { return c.raw.SetDeadline(t) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.raw.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.raw.SetWriteDeadline(t) }

func gnutlsError(what string, rc C.int) error {
	return fmt.Errorf("tls-psk: %s: %s", what, C.GoString(C.gnutls_strerror(rc)))
}
