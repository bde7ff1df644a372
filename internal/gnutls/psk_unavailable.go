//go:build !(ebbfs_gnutls && cgo && linux)

package gnutls

import (
	"context"
	"errors"
	"net"
)

// Available reports whether this build can serve TLS-PSK.
const Available = false

var errUnavailable = errors.New("tls-psk: this ebbfs was built without GnuTLS (install libgnutls28-dev and rebuild with make build)")

// PSKServer is not available in this build.
type PSKServer struct{}

// NewPSKServer fails: this build has no GnuTLS.
func NewPSKServer(string) (*PSKServer, error) { return nil, errUnavailable }

// Close does nothing.
func (*PSKServer) Close() {}

// Handshake fails: this build has no GnuTLS.
func (*PSKServer) Handshake(context.Context, net.Conn) (*Conn, error) { return nil, errUnavailable }

// Conn is not available in this build.
type Conn struct{ net.Conn }

// Identity is empty in this build.
func (*Conn) Identity() string { return "" }
