// Command mountbench measures, in one run and on the same disk, a plain
// directory, a go-fuse loopback (passthrough) of a directory and ebbfs on a
// local-directory store, and prints each workload's throughput with its
// ratio to the passthrough and the targets ebbfs is held to.
//
// Run it from the repository as root (it drops the page cache and mounts):
//
//	go run ./bench/mountbench [-size 1GiB] [-files 5000] [-dir /var/tmp] [-keep] [-rounds 1]
//	    [-fsyncs 2000] [-rw-size 256MiB] [-rw-writes 65536] [-rw-settle 180s]
//
// It builds ./cmd/ebbfs, runs `ebbfs init` and `ebbfs run` as a child with
// [cache] memory_size = "256MiB", serves the loopback from a second child
// (itself, with -serve-loopback), and stops both with umount(8) at the end,
// expecting exit status 0. Every way out (error, signal, -timeout) unmounts
// what it mounted, lazily if need be, before it removes the work directory.
// The db group (-groups db, make bench-db; not in the default groups) runs
// real database clients and a VM's disk on every target: pgbench with
// PostgreSQL's data directory on it (the server run as the postgres user),
// the sqlite3 shell in WAL and rollback-journal modes, and fio inside ext4
// on a loop device over nbdfuse's file of an NBD export.
// See bench/README.md for the workloads and the columns.
package main
