#!/usr/bin/env bash
# Installs the S3 server the tests run against (versitygw, posix backend)
# at a pinned version into $(go env GOPATH)/bin, building it from the Go
# module proxy. Idempotent: does nothing if that version is already there.
#
#   scripts/install-s3-server.sh          # install or confirm
#   EBBFS_VERSITYGW=/path/to/versitygw    # tests use this binary instead
set -euo pipefail

VERSION=v1.8.0
MODULE=github.com/versity/versitygw
GOBIN_DIR="$(go env GOPATH | cut -d: -f1)/bin"
BIN="$GOBIN_DIR/versitygw"

installed_version() {
	# The module version go install recorded in the binary.
	go version -m "$1" 2>/dev/null | awk -v m="$MODULE" '$1 == "mod" && $2 == m { print $3 }'
}

if [ -x "$BIN" ] && [ "$(installed_version "$BIN")" = "$VERSION" ]; then
	echo "versitygw $VERSION already installed at $BIN"
	exit 0
fi

echo "building versitygw $VERSION into $GOBIN_DIR (takes a few minutes)"
mkdir -p "$GOBIN_DIR"
# Build outside any module so the caller's go.mod and GOFLAGS do not apply.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
GOFLAGS= GOBIN="$GOBIN_DIR" go install "$MODULE/cmd/versitygw@$VERSION"

got="$(installed_version "$BIN")"
if [ "$got" != "$VERSION" ]; then
	echo "install-s3-server: $BIN reports version '${got:-unknown}', want $VERSION" >&2
	exit 1
fi
echo "installed versitygw $VERSION at $BIN"
