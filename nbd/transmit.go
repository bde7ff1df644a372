package nbd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/worker"
)

// request is one parsed transmission-phase request.
type request struct {
	flags  uint16
	typ    uint16
	handle uint64
	off    uint64
	length uint32
	data   []byte // WRITE payload
}

// budget bounds the requests of one connection in flight, by count and by
// buffered bytes, so a client cannot make the server hold more than about
// 2*MaxRequest bytes of payload per connection.
type budget struct {
	mu       sync.Mutex
	cond     sync.Cond
	n, bytes int
	maxBytes int
}

func newBudget(maxBytes int) *budget {
	b := &budget{maxBytes: maxBytes}
	b.cond.L = &b.mu
	return b
}

func (b *budget) acquire(bytes int) {
	b.mu.Lock()
	for b.n >= maxInFlight || (b.n > 0 && b.bytes+bytes > b.maxBytes) {
		b.cond.Wait()
	}
	b.n++
	b.bytes += bytes
	b.mu.Unlock()
}

func (b *budget) release(bytes int) {
	b.mu.Lock()
	b.n--
	b.bytes -= bytes
	b.mu.Unlock()
	b.cond.Broadcast()
}

// transmit runs the transmission phase: the calling goroutine reads
// requests, each request runs in its own goroutine bounded by a budget, and
// replies are written whole under c.wmu. It returns after every started
// request has been answered.
func (c *conn) transmit() error {
	bud := newBudget(2 * c.s.o.MaxRequest)
	var requests worker.Group
	defer requests.Wait()
	maxReq := uint32(c.s.o.MaxRequest)
	var hdr [requestHeaderSize]byte
	for {
		if c.closing.Load() {
			return errors.New("server closing")
		}
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) || c.closing.Load() {
				return nil
			}
			return fmt.Errorf("reading request: %w", err)
		}
		if m := binary.BigEndian.Uint32(hdr[0:]); m != requestMagic {
			return fmt.Errorf("bad request magic %#x", m)
		}
		r := &request{
			flags:  binary.BigEndian.Uint16(hdr[4:]),
			typ:    binary.BigEndian.Uint16(hdr[6:]),
			handle: binary.BigEndian.Uint64(hdr[8:]),
			off:    binary.BigEndian.Uint64(hdr[16:]),
			length: binary.BigEndian.Uint32(hdr[24:]),
		}
		cost := 0
		switch r.typ {
		case cmdDisc:
			return nil
		case cmdWrite:
			if r.length > maxReq {
				// The payload would have to be read to stay in
				// sync; refuse and close instead.
				c.reply(r.handle, errnoInval, nil)
				return fmt.Errorf("WRITE of %d bytes exceeds %d", r.length, maxReq)
			}
			cost = int(r.length)
		case cmdRead:
			if r.length <= maxReq {
				cost = int(r.length)
			}
		}
		bud.acquire(cost)
		if r.typ == cmdWrite {
			r.data = make([]byte, r.length)
			if _, err := io.ReadFull(c.br, r.data); err != nil {
				// A partial payload is dropped, never applied.
				bud.release(cost)
				return fmt.Errorf("reading WRITE payload: %w", err)
			}
		}
		requests.Go(func() {
			defer bud.release(cost)
			c.handle(r)
		})
	}
}

// reply answers a request: a simple reply (with data only on success), or,
// once structured replies are negotiated, a structured NONE or ERROR chunk
// (structured READs and BLOCK_STATUS send their own chunks).
func (c *conn) reply(handle uint64, errno uint32, data []byte) {
	if c.structured {
		if errno != errnoOK {
			c.send(errorChunk(handle, errno))
			return
		}
		c.send(net.Buffers{chunkHeader(handle, replyFlagDone, replyTypeNone, 0)})
		return
	}
	h := make([]byte, replyHeaderSize)
	binary.BigEndian.PutUint32(h[0:], simpleReplyMagic)
	binary.BigEndian.PutUint32(h[4:], errno)
	binary.BigEndian.PutUint64(h[8:], handle)
	bufs := net.Buffers{h}
	if errno == errnoOK && len(data) > 0 {
		bufs = append(bufs, data)
	}
	c.send(bufs)
}

// send writes one whole reply. After a write error later replies are
// dropped.
func (c *conn) send(bufs net.Buffers) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return
	}
	c.raw.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := c.write(bufs); err != nil {
		c.werr = err
		c.log.Info("nbd: writing reply", "export", c.name, "err", err)
		// The stream is broken: make the reader stop too.
		c.raw.Close()
	}
}

// write writes bufs: with writev on a plain connection; through c.bw over
// TLS, where each Write would otherwise be a TLS record and a system call
// of its own (a header of 16 or 20 bytes, then the data).
func (c *conn) write(bufs net.Buffers) error {
	if c.bw == nil {
		_, err := bufs.WriteTo(c.nc)
		return err
	}
	for _, b := range bufs {
		if _, err := c.bw.Write(b); err != nil {
			return err
		}
	}
	return c.bw.Flush()
}

// handle runs one request against the export and replies.
func (c *conn) handle(r *request) {
	var errno uint32
	var err error
	switch {
	case r.typ == cmdBlockStatus:
		errno, err = c.blockStatus(r)
	case r.typ == cmdRead && c.structured:
		errno, err = c.structuredRead(r)
	default:
		var data []byte
		errno, data, err = c.do(r)
		if errno == errnoOK {
			c.reply(r.handle, errno, data)
		}
	}
	if err != nil {
		c.log.Warn("nbd: request failed", "export", c.name, "cmd", cmdName(r.typ),
			"offset", r.off, "length", r.length, "errno", errnoName(errno), "err", err)
	}
	if errno != errnoOK {
		c.reply(r.handle, errno, nil)
	}
}

// knownFlags are the command flags r may carry.
func (c *conn) knownFlags(typ uint16) uint16 {
	known := cmdFlagFUA
	switch typ {
	case cmdWriteZeroes:
		known |= cmdFlagNoHole
	case cmdRead:
		if c.structured {
			known |= cmdFlagDF
		}
	case cmdBlockStatus:
		known |= cmdFlagReqOne
	}
	return known
}

// checkRange reads the export's size (once per request) and checks r's
// range against it. It returns the NBD error for a bad range.
func (c *conn) checkRange(r *request) (uint32, error) {
	cur, err := c.exp.Size()
	if err != nil {
		return errnoIO, fmt.Errorf("size: %w", err)
	}
	size := min(c.size, cur)
	if r.off > uint64(size) || uint64(r.length) > uint64(size)-r.off {
		if r.typ == cmdWrite || r.typ == cmdWriteZeroes {
			return errnoNoSpc, nil
		}
		return errnoInval, nil
	}
	return errnoOK, nil
}

// do executes r. It returns the NBD error, READ data, and the backend error
// to log (nil for protocol errors the client caused).
//
// Only READ runs on the connection's context. FLUSH, FUA, WRITE, TRIM and
// WRITE_ZEROES run on a context that nothing cancels: once one has started
// changing the export (or making it durable) it runs to its end, whether
// the client hangs up or the server shuts down (Server.Close waits for it),
// so a barrier is never abandoned half way and a reply, when one can still
// be sent, is the real result.
//
// The export's size is read once per request, in checkRange, and the range
// checks use that value; the backend never grows a file past its size.
func (c *conn) do(r *request) (uint32, []byte, error) {
	keep := context.WithoutCancel(c.ctx)
	if r.flags&^c.knownFlags(r.typ) != 0 {
		return errnoInval, nil, nil
	}
	switch r.typ {
	case cmdFlush:
		if err := c.exp.Flush(keep); err != nil {
			return errnoOf(err), nil, err
		}
		return errnoOK, nil, nil
	case cmdRead, cmdWrite, cmdTrim, cmdWriteZeroes:
	default:
		return errnoInval, nil, nil
	}
	if r.typ == cmdRead && r.length > uint32(c.s.o.MaxRequest) {
		return errnoInval, nil, nil
	}
	if r.typ != cmdRead && c.readOnly {
		return errnoPerm, nil, nil
	}
	if errno, err := c.checkRange(r); errno != errnoOK {
		return errno, nil, err
	}
	if r.length == 0 {
		return errnoOK, nil, nil
	}
	off, n := int64(r.off), int64(r.length)
	var err error
	switch r.typ {
	case cmdRead:
		buf := make([]byte, n)
		if err := c.exp.ReadAt(c.ctx, buf, off); err != nil {
			return errnoOf(err), nil, err
		}
		return errnoOK, buf, nil
	case cmdWrite:
		err = c.exp.WriteAt(keep, r.data, off)
	case cmdTrim:
		err = c.exp.Trim(keep, off, n)
	case cmdWriteZeroes:
		err = c.exp.Zero(keep, off, n, r.flags&cmdFlagNoHole == 0)
	}
	if err == nil && r.flags&cmdFlagFUA != 0 {
		err = c.exp.Flush(keep)
	}
	if err != nil {
		return errnoOf(err), nil, err
	}
	return errnoOK, nil, nil
}

func cmdName(t uint16) string {
	switch t {
	case cmdRead:
		return "READ"
	case cmdWrite:
		return "WRITE"
	case cmdDisc:
		return "DISC"
	case cmdFlush:
		return "FLUSH"
	case cmdTrim:
		return "TRIM"
	case cmdCache:
		return "CACHE"
	case cmdWriteZeroes:
		return "WRITE_ZEROES"
	case cmdBlockStatus:
		return "BLOCK_STATUS"
	}
	return fmt.Sprintf("cmd%d", t)
}
