package config

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// PasswordEnv is the environment variable holding the password when no
// password file is configured.
const PasswordEnv = "EBBFS_PASSWORD"

// maxPasswordFile bounds how much of a password file is read.
const maxPasswordFile = 64 << 10

// Password returns the filesystem password and a description of where it
// came from ("password file /etc/ebbfs/password" or "EBBFS_PASSWORD") for
// error messages. The length rule is enforced by fs.Init and the key code,
// not here.
func (c *Config) Password() (pw, source string, err error) {
	if c.Encryption.PasswordFile != "" {
		source = "password file " + c.Encryption.PasswordFile
		pw, err = ReadPasswordFile(c.Encryption.PasswordFile)
		return pw, source, err
	}
	return PasswordFromEnv(PasswordEnv)
}

// PasswordFromEnv reads a password from an environment variable.
func PasswordFromEnv(name string) (pw, source string, err error) {
	pw, ok := os.LookupEnv(name)
	if !ok || pw == "" {
		return "", name, fmt.Errorf("no password: set [encryption] password_file in the config or the %s environment variable", name)
	}
	return pw, name, nil
}

// ReadPasswordFile reads a password file; one trailing newline (LF or CRLF)
// is removed, everything else is kept as written.
func ReadPasswordFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, maxPasswordFile+1))
	if err != nil {
		return "", fmt.Errorf("password file %s: %w", p, err)
	}
	if len(buf) > maxPasswordFile {
		return "", fmt.Errorf("password file %s is larger than %d bytes", p, maxPasswordFile)
	}
	s := string(buf)
	s = strings.TrimSuffix(s, "\n")
	s = strings.TrimSuffix(s, "\r")
	if s == "" {
		return "", fmt.Errorf("password file %s is empty", p)
	}
	if strings.ContainsAny(s, "\n\x00") {
		return "", fmt.Errorf("password file %s holds more than one line", p)
	}
	return s, nil
}
