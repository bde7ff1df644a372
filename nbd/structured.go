package nbd

import (
	"encoding/binary"
	"fmt"
	"net"
)

// Structured replies: every chunk is a 20-byte header (magic, flags, type,
// handle, payload length) and a payload; the last chunk of a reply carries
// NBD_REPLY_FLAG_DONE. This server writes each reply's chunks together,
// so the chunks of different replies never interleave.

// chunkHeader returns a structured reply chunk header.
func chunkHeader(handle uint64, flags, typ uint16, length int) []byte {
	h := make([]byte, structHeaderSize)
	binary.BigEndian.PutUint32(h[0:], structReplyMagic)
	binary.BigEndian.PutUint16(h[4:], flags)
	binary.BigEndian.PutUint16(h[6:], typ)
	binary.BigEndian.PutUint64(h[8:], handle)
	binary.BigEndian.PutUint32(h[16:], uint32(length))
	return h
}

// errorChunk is a final NBD_REPLY_TYPE_ERROR chunk with no message.
func errorChunk(handle uint64, errno uint32) net.Buffers {
	b := chunkHeader(handle, replyFlagDone, replyTypeError, 6)
	b = binary.BigEndian.AppendUint32(b, errno)
	b = binary.BigEndian.AppendUint16(b, 0)
	return net.Buffers{b}
}

// dataChunks answers a READ of buf at off whose layout is ext (covering
// len(buf) bytes): OFFSET_DATA chunks for data, OFFSET_HOLE chunks for
// holes, DONE on the last.
func dataChunks(handle uint64, off int64, buf []byte, ext []Extent) net.Buffers {
	var bufs net.Buffers
	pos := int64(0)
	for i, e := range ext {
		var flags uint16
		if i == len(ext)-1 {
			flags = replyFlagDone
		}
		if e.Hole {
			h := chunkHeader(handle, flags, replyTypeOffsetHole, 12)
			h = binary.BigEndian.AppendUint64(h, uint64(off+pos))
			h = binary.BigEndian.AppendUint32(h, uint32(e.Length))
			bufs = append(bufs, h)
		} else {
			h := chunkHeader(handle, flags, replyTypeOffsetData, 8+int(e.Length))
			h = binary.BigEndian.AppendUint64(h, uint64(off+pos))
			bufs = append(bufs, h, buf[pos:pos+e.Length])
		}
		pos += e.Length
	}
	return bufs
}

// extents returns the layout of [off, off+length) from Export.Extents,
// asking again until it is covered or max extents are found; the result
// covers a prefix of the range, all of it unless max stopped it. Extents
// the backend reports past the range are clipped, adjacent extents of
// the same kind merged.
func (c *conn) extents(off, length int64, max int) ([]Extent, error) {
	var out []Extent
	pos, end := off, off+length
	for pos < end && len(out) < max {
		ext, err := c.exp.Extents(c.ctx, pos, end-pos)
		if err != nil {
			return nil, err
		}
		if len(ext) == 0 {
			return nil, fmt.Errorf("extents %d+%d: the export described nothing", pos, end-pos)
		}
		for _, e := range ext {
			if e.Length <= 0 {
				return nil, fmt.Errorf("extents %d+%d: an extent of length %d", pos, end-pos, e.Length)
			}
			e.Length = min(e.Length, end-pos)
			if k := len(out) - 1; k >= 0 && out[k].Hole == e.Hole {
				out[k].Length += e.Length
			} else {
				out = append(out, e)
			}
			pos += e.Length
			if pos == end {
				break
			}
		}
	}
	return out[:min(len(out), max)], nil
}

// structuredRead answers a READ with structured replies. A large read
// without NBD_CMD_FLAG_DF asks the export where its holes are, reads only
// the data and sends the holes as OFFSET_HOLE chunks.
func (c *conn) structuredRead(r *request) (uint32, error) {
	if errno, err := c.readChecked(r); errno != errnoOK {
		return errno, err
	}
	n := int64(r.length)
	if n == 0 || r.flags&cmdFlagDF != 0 || n < holeReadMin {
		buf := make([]byte, n)
		if n > 0 {
			if err := c.exp.ReadAt(c.ctx, buf, int64(r.off)); err != nil {
				return errnoOf(err), err
			}
		}
		if n == 0 {
			c.send(net.Buffers{chunkHeader(r.handle, replyFlagDone, replyTypeNone, 0)})
			return errnoOK, nil
		}
		c.send(dataChunks(r.handle, int64(r.off), buf, []Extent{{Length: n}}))
		return errnoOK, nil
	}
	ext, err := c.extents(int64(r.off), n, int(n)) // at most one extent per byte: covers it all
	if err != nil {
		return errnoOf(err), err
	}
	buf := make([]byte, n)
	pos := int64(0)
	for _, e := range ext {
		if !e.Hole {
			if err := c.exp.ReadAt(c.ctx, buf[pos:pos+e.Length], int64(r.off)+pos); err != nil {
				return errnoOf(err), err
			}
		}
		pos += e.Length
	}
	c.send(dataChunks(r.handle, int64(r.off), buf, ext))
	return errnoOK, nil
}

// readChecked applies the checks of a READ: flags, MaxRequest and range.
func (c *conn) readChecked(r *request) (uint32, error) {
	if r.flags&^c.knownFlags(r.typ) != 0 || r.length > uint32(c.s.o.MaxRequest) {
		return errnoInval, nil
	}
	return c.checkRange(r)
}

// blockStatus answers NBD_CMD_BLOCK_STATUS for base:allocation: one
// BLOCK_STATUS chunk of (length, flags) descriptors starting at the
// requested offset, holes as HOLE|ZERO and data as 0; one descriptor with
// NBD_CMD_FLAG_REQ_ONE, at most maxStatusExtents otherwise.
func (c *conn) blockStatus(r *request) (uint32, error) {
	if !c.metaAlloc || r.flags&^c.knownFlags(r.typ) != 0 || r.length == 0 {
		return errnoInval, nil
	}
	if errno, err := c.checkRange(r); errno != errnoOK {
		return errno, err
	}
	limit := maxStatusExtents
	if r.flags&cmdFlagReqOne != 0 {
		limit = 1
	}
	ext, err := c.extents(int64(r.off), int64(r.length), limit)
	if err != nil {
		return errnoOf(err), err
	}
	b := chunkHeader(r.handle, replyFlagDone, replyTypeBlockStatus, 4+8*len(ext))
	b = binary.BigEndian.AppendUint32(b, metaAllocID)
	for _, e := range ext {
		var state uint32
		if e.Hole {
			state = stateHole | stateZero
		}
		b = binary.BigEndian.AppendUint32(b, uint32(e.Length))
		b = binary.BigEndian.AppendUint32(b, state)
	}
	c.send(net.Buffers{b})
	return errnoOK, nil
}
