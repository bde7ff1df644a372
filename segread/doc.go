// Package segread reads frames of segment objects back from the object
// store, through a memory cache of plaintexts and a local-disk cache of
// sealed frames, with read-ahead; the byte formats it decodes are package
// segment's.
package segread
