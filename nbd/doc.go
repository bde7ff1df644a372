// Package nbd is a Network Block Device server. It serves the exports of a
// Backend (in ebbfs: the regular files of /.nbd/) to NBD clients such as
// the Linux kernel, qemu and libnbd tools.
//
// Protocol subset, all integers big-endian:
//
//   - Fixed newstyle negotiation. The server sends "NBDMAGIC", "IHAVEOPT"
//     and the handshake flags FIXED_NEWSTYLE|NO_ZEROES; the client answers
//     with its flags (unknown bits close the connection).
//   - Options: EXPORT_NAME, ABORT, LIST, INFO, GO, STRUCTURED_REPLY,
//     LIST_META_CONTEXT, SET_META_CONTEXT and (on a TLS listener, see
//     ServeTLS) STARTTLS. INFO/GO always reply NBD_INFO_EXPORT and
//     NBD_INFO_BLOCK_SIZE (minimum 1, preferred the export's BlockSize,
//     maximum Options.MaxRequest), plus NBD_INFO_NAME and
//     NBD_INFO_DESCRIPTION when requested. Every other option gets
//     NBD_REP_ERR_UNSUP; extended headers are not offered (the Debian
//     clients, libnbd 1.14 and qemu 7.2, do not use them). An empty export
//     name means the only export, if there is exactly one. Option payloads
//     over 64 KiB get NBD_REP_ERR_TOO_BIG and the connection is closed
//     without reading them.
//   - Meta contexts: one, base:allocation (meta.go). SET needs structured
//     replies first and applies only to the export it names.
//   - Transmission flags: HAS_FLAGS, SEND_FLUSH, CAN_MULTI_CONN and either
//     READ_ONLY or SEND_FUA|SEND_TRIM|SEND_WRITE_ZEROES. Multi-conn is safe
//     because Export.Flush is a global barrier.
//   - Commands READ, WRITE, FLUSH, TRIM, WRITE_ZEROES (flags FUA, and
//     NO_HOLE on WRITE_ZEROES), BLOCK_STATUS (flag REQ_ONE; with
//     base:allocation selected) and DISC. Up to 16 requests per connection
//     run concurrently; each reply is written whole. Ranges past the end
//     get EINVAL (ENOSPC for WRITE and WRITE_ZEROES); a READ longer than
//     MaxRequest gets EINVAL; a WRITE longer than MaxRequest gets EINVAL
//     and the connection is closed, since its payload is not read. A WRITE
//     whose payload is cut short is never applied.
//   - Replies are simple unless structured replies were negotiated; then
//     every reply is structured (structured.go): NONE or ERROR chunks,
//     READ as OFFSET_DATA chunks with holes as OFFSET_HOLE chunks (reads
//     of 64 KiB or more without the DF flag, which is advertised), and
//     BLOCK_STATUS as one BLOCK_STATUS chunk of at most 2048 descriptors
//     (holes HOLE|ZERO, data 0) from Export.Extents.
package nbd
