// Package gnutls serves TLS with pre-shared keys (TLS-PSK) through GnuTLS,
// which Go's crypto/tls does not offer: the server side of the handshake
// and the record layer over a net.Conn, for the NBD listener. It is built
// with the ebbfs_gnutls tag (the Makefile sets it when the GnuTLS headers
// are installed); without it, Available is false and NewPSKServer says so.
package gnutls

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
)

// ParseKeyFile checks a PSK key file in the format of GnuTLS's psktool,
// which qemu and nbdkit read too: one "identity:hexkey" per line. It
// returns the identities; an empty file, a line without a colon, an empty
// identity or key, a key that is not hex, or an identity given twice is
// an error naming the line.
func ParseKeyFile(b []byte) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	for i, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		id, key, ok := bytes.Cut(line, []byte(":"))
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: want identity:hexkey", i+1)
		case len(id) == 0:
			return nil, fmt.Errorf("line %d: empty identity", i+1)
		case len(key) == 0:
			return nil, fmt.Errorf("line %d: empty key for %q", i+1, id)
		case seen[string(id)]:
			return nil, fmt.Errorf("line %d: identity %q given twice", i+1, id)
		}
		if _, err := hex.DecodeString(string(key)); err != nil {
			return nil, fmt.Errorf("line %d: key for %q is not hex: %w", i+1, id, err)
		}
		seen[string(id)] = true
		ids = append(ids, string(id))
	}
	if len(ids) == 0 {
		return nil, errors.New("no key in it")
	}
	return ids, nil
}
