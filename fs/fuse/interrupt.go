package fuse

import "context"

// Interrupts. go-fuse cancels a request's context when the kernel sends
// FUSE_INTERRUPT (the calling thread caught a signal). A call may honour
// that only while it has changed nothing: it then returns EINTR and the
// caller (or its runtime) retries. Once an operation has had an effect, it
// must finish and report what really happened, or the caller would retry
// (or give up on) something already done.
//
// The rule per operation:
//
//   - fsync, fdatasync, fsyncdir (and so msync and syncfs, which end in
//     them) run the durability barrier on keep(ctx): a barrier abandoned
//     half way would report a failure for data that may already be durable
//     and, worse, make callers that treat EINTR as "try again" see a
//     durability call that never succeeds under a signal storm.
//   - Every namespace and attribute change (create, mknod, mkdir, symlink,
//     link, unlink, rmdir, rename, setattr including truncate, setxattr,
//     removexattr, fallocate and punch, open with O_TRUNC) runs on
//     keep(ctx): the engine commits each in one step, but truncate and
//     punch can stop between zeroing the edges and dropping pointers, and
//     create is followed by the open of the new file.
//   - write and copy_file_range run on a patient request context
//     (patient.go): an interrupt counts only once the call has run for
//     WriteInterruptAfter, or at once for a fatal signal, so a write that
//     goes through is never failed with EINTR. The engine waits for dirty
//     memory before it copies anything (an interrupt there is a clean
//     EINTR), and once some bytes are in, a later interruption ends the
//     call with the count written so far, never with EINTR. A write that
//     first had to clear set-user-ID or set-group-ID has changed the file
//     already and runs on keep(ctx).
//   - Reads, lookups, getattr, readdir, readlink, getxattr, listxattr,
//     lseek and statfs change nothing and may be interrupted at any point;
//     a read that already has bytes returns them.
//   - release runs on context.Background (a lost release would keep an
//     unlinked file forever).
func keep(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
