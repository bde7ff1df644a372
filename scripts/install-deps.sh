#!/usr/bin/env bash
# Installs what the ebbfs tests need on a fresh Debian/Ubuntu machine:
#   fuse3 (fusermount3, /dev/fuse users), libnbd-bin (nbdinfo, nbdcopy),
#   nbdfuse, qemu-utils (qemu-img, qemu-nbd), e2fsprogs (mkfs.ext4), util-linux
#   (mount, umount), dmsetup (the cache disk EIO test: device-mapper's error
#   target), tmux (the monitor test), chromium (the status page test,
#   headless), libgnutls28-dev (NBD over TLS-PSK is built with GnuTLS), fio
#   (the NBD random-I/O benchmark and make bench-db's VM case), postgresql
#   (make bench-db's pgbench, its server run as the postgres user), sqlite3
#   (make bench-db and the SQLite test on the mount), and
#   the S3 server (scripts/install-s3-server.sh).
# Idempotent: installs only what is missing; runs apt-get update only when
# it has something to install. As non-root it only reports what is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# package -> a command it provides (to decide whether it is installed)
declare -A probe=(
	[fuse3]=fusermount3
	[libnbd-bin]=nbdinfo
	[nbdfuse]=nbdfuse
	[qemu-utils]=qemu-img
	[e2fsprogs]=mkfs.ext4
	[util-linux]=umount
	[tmux]=tmux
	[chromium]=chromium
	[spin]=spin
	[gcc]=gcc
	[iproute2]=ip
	[dmsetup]=dmsetup
	[libgnutls28-dev]= # headers only: dpkg decides
	[fio]=fio
	[postgresql]= # the server's programs are under /usr/lib/postgresql/N/bin: dpkg decides
	[sqlite3]=sqlite3
)

missing=()
for pkg in fuse3 libnbd-bin nbdfuse qemu-utils e2fsprogs util-linux tmux chromium spin gcc iproute2 dmsetup libgnutls28-dev fio postgresql sqlite3; do
	if ! { [ -n "${probe[$pkg]}" ] && command -v "${probe[$pkg]}" >/dev/null 2>&1; } && ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$pkg")
	fi
done

if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: missing packages: ${missing[*]} (run as root to install them)" >&2
	elif ! command -v apt-get >/dev/null 2>&1; then
		echo "install-deps: missing packages: ${missing[*]} and no apt-get to install them" >&2
		exit 1
	else
		echo "install-deps: installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${missing[@]}"
	fi
else
	echo "install-deps: system packages present"
fi

# /dev/fuse may be absent in a fresh container even with fuse3 installed.
if [ "$(id -u)" -eq 0 ] && [ ! -e /dev/fuse ]; then
	mknod -m 0666 /dev/fuse c 10 229 || echo "install-deps: could not create /dev/fuse" >&2
fi
if [ "$(id -u)" -eq 0 ] && command -v modprobe >/dev/null 2>&1; then
	modprobe fuse 2>/dev/null || true
	# device-mapper and its error target (tests/cacheeio_test.go)
	modprobe dm_mod 2>/dev/null || true
fi

if [ -x "$here/install-s3-server.sh" ] || [ -f "$here/install-s3-server.sh" ]; then
	bash "$here/install-s3-server.sh"
else
	echo "install-deps: scripts/install-s3-server.sh not present; S3 tests will lack a server" >&2
fi
