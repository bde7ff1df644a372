// Package directio reads and writes local files past the page cache
// (O_DIRECT) where that saves the disk or the memory work: spans a
// random read asks for (File, ReadDirect) and large aligned writes
// (WriteNew, WriteAt), falling back to ordinary I/O wherever the
// filesystem, the buffer's alignment or the page cache says so.
package directio
