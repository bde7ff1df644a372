package config

import (
	"errors"
	"fmt"
)

// TLS reports whether the NBD TCP listeners require TLS.
func (n *NBD) TLS() bool { return n.TLSCert != "" || n.TLSPSKFile != "" }

// validateTLS checks the TLS keys of [nbd] and refuses a listen address
// that is not loopback unless TLS is on or the network is declared
// trusted: an NBD export is readable and writable by whoever reaches it.
func (n *NBD) validateTLS() error {
	if (n.TLSCert == "") != (n.TLSKey == "") {
		return errors.New("nbd.tls_cert and nbd.tls_key go together: set both or neither")
	}
	if n.TLSClientCA != "" && n.TLSCert == "" {
		return errors.New("nbd.tls_client_ca needs nbd.tls_cert and nbd.tls_key")
	}
	if n.TLSPSKFile != "" && n.TLSCert != "" {
		return errors.New("nbd.tls_psk_file and nbd.tls_cert exclude each other: a listener uses pre-shared keys or certificates")
	}
	if n.TLS() || n.TrustedNetwork {
		return nil
	}
	for _, a := range n.Listen {
		if !IsLoopback(a) {
			return fmt.Errorf("nbd.listen %q is not loopback: set nbd.tls_cert and nbd.tls_key (TLS), or nbd.tls_psk_file (TLS-PSK), or nbd.trusted_network = true if everyone who can reach it may read and write the exports", a)
		}
	}
	return nil
}
