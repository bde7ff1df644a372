package nbd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// errAbort ends a handshake the client aborted; it is not logged as a
// failure.
var errAbort = errors.New("client aborted negotiation")

// handshake runs the fixed newstyle negotiation. It returns true when the
// transmission phase starts, with c.exp, c.name and c.size set.
func (c *conn) handshake() (bool, error) {
	var hello [18]byte
	binary.BigEndian.PutUint64(hello[0:], nbdMagic)
	binary.BigEndian.PutUint64(hello[8:], ihaveOpt)
	binary.BigEndian.PutUint16(hello[16:], flagFixedNewstyle|flagNoZeroes)
	if _, err := c.nc.Write(hello[:]); err != nil {
		return false, err
	}
	var cf [4]byte
	if _, err := io.ReadFull(c.br, cf[:]); err != nil {
		return false, fmt.Errorf("reading client flags: %w", err)
	}
	clientFlags := binary.BigEndian.Uint32(cf[:])
	if clientFlags&^clientFlagsKnown != 0 {
		return false, fmt.Errorf("unknown client flags %#x", clientFlags)
	}
	noZeroes := clientFlags&clientFlagNoZeroes != 0

	for range maxOptions {
		if c.closing.Load() {
			return false, errors.New("server closing")
		}
		var h [16]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return false, fmt.Errorf("reading option header: %w", err)
		}
		if m := binary.BigEndian.Uint64(h[0:]); m != ihaveOpt {
			return false, fmt.Errorf("bad option magic %#x", m)
		}
		opt := binary.BigEndian.Uint32(h[8:])
		n := binary.BigEndian.Uint32(h[12:])
		if n > maxOptionLength {
			if opt != optExportName {
				// Best effort: the payload is not read, so the
				// connection cannot continue.
				c.optReply(opt, repErrTooBig, []byte("option too large"))
			}
			return false, fmt.Errorf("option %d: length %d exceeds %d", opt, n, maxOptionLength)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(c.br, data); err != nil {
			return false, fmt.Errorf("reading option %d payload: %w", opt, err)
		}

		started, err := c.option(opt, data, noZeroes)
		if started || err != nil {
			return started, err
		}
	}
	return false, fmt.Errorf("more than %d options", maxOptions)
}

// option handles one option. It returns true when the transmission phase
// starts, and an error when the connection must close.
func (c *conn) option(opt uint32, data []byte, noZeroes bool) (bool, error) {
	if c.tlsStart != nil && !c.tls {
		// TLS is required and not started yet: only STARTTLS and ABORT
		// are answered.
		switch opt {
		case optStartTLS, optAbort:
		case optExportName:
			return false, errors.New("NBD_OPT_EXPORT_NAME before STARTTLS on a TLS listener")
		default:
			return false, c.optReply(opt, repErrTLSReqd, []byte("TLS is required: send NBD_OPT_STARTTLS"))
		}
	}
	switch opt {
	case optExportName:
		return c.optExportName(data, noZeroes)
	case optAbort:
		c.optReply(opt, repAck, nil) // the client may already be gone
		return false, errAbort
	case optList:
		return false, c.optList(data)
	case optInfo, optGo:
		return c.optInfoGo(opt, data)
	case optStartTLS:
		return false, c.optStartTLS(data)
	case optStructuredReply:
		if len(data) != 0 {
			return false, c.optReply(opt, repErrInvalid, []byte("NBD_OPT_STRUCTURED_REPLY takes no data"))
		}
		c.structured = true
		return false, c.optReply(opt, repAck, nil)
	case optListMetaContext, optSetMetaContext:
		return false, c.optMetaContext(opt, data)
	}
	return false, c.optReply(opt, repErrUnsup, []byte("option not supported"))
}

// optReply writes one option reply.
func (c *conn) optReply(opt, typ uint32, data []byte) error {
	b := make([]byte, 20+len(data))
	binary.BigEndian.PutUint64(b[0:], optReplyMagic)
	binary.BigEndian.PutUint32(b[8:], opt)
	binary.BigEndian.PutUint32(b[12:], typ)
	binary.BigEndian.PutUint32(b[16:], uint32(len(data)))
	copy(b[20:], data)
	_, err := c.nc.Write(b)
	return err
}

// validName reports whether name is acceptable as an export name.
func validName(name []byte) bool {
	return len(name) <= maxNameLength && bytes.IndexByte(name, 0) < 0
}

// resolve maps a requested name to an export name: the empty name means the
// only export, if there is exactly one.
func (c *conn) resolve(name string) (string, error) {
	if name != "" {
		return name, nil
	}
	list, err := c.s.b.List(c.ctx)
	if err != nil {
		return "", err
	}
	if len(list) != 1 {
		return "", fmt.Errorf("empty name with %d exports: %w", len(list), ErrNoSuchExport)
	}
	return list[0].Name, nil
}

// open resolves and opens an export and reads its size.
func (c *conn) open(name string) (Export, string, int64, error) {
	name, err := c.resolve(name)
	if err != nil {
		return nil, "", 0, err
	}
	exp, err := c.s.b.Open(c.ctx, name)
	if err != nil {
		return nil, "", 0, err
	}
	size, err := exp.Size()
	if err == nil && size < 0 {
		err = fmt.Errorf("negative size %d", size)
	}
	if err != nil {
		exp.Close()
		return nil, "", 0, fmt.Errorf("export %q size: %w", name, err)
	}
	return exp, name, size, nil
}

func (c *conn) transmissionFlags() uint16 {
	f := tflagHasFlags | tflagSendFlush | tflagCanMultiConn
	if c.readOnly {
		f |= tflagReadOnly
	} else {
		f |= tflagSendFUA | tflagSendTrim | tflagSendWriteZeroes
	}
	if c.structured {
		f |= tflagSendDF
	}
	return f
}

func (c *conn) optExportName(data []byte, noZeroes bool) (bool, error) {
	if !validName(data) {
		return false, errors.New("NBD_OPT_EXPORT_NAME: invalid name")
	}
	exp, name, size, err := c.open(string(data))
	if err != nil {
		// The protocol offers no error reply here: close.
		return false, fmt.Errorf("NBD_OPT_EXPORT_NAME %q: %w", data, err)
	}
	c.setExport(exp, name, size)
	b := make([]byte, 10, 10+124)
	binary.BigEndian.PutUint64(b[0:], uint64(size))
	binary.BigEndian.PutUint16(b[8:], c.transmissionFlags())
	if !noZeroes {
		b = b[:10+124]
	}
	if _, err := c.nc.Write(b); err != nil {
		return false, err
	}
	return true, nil
}

func (c *conn) optList(data []byte) error {
	if len(data) != 0 {
		return c.optReply(optList, repErrInvalid, []byte("NBD_OPT_LIST takes no data"))
	}
	list, err := c.s.b.List(c.ctx)
	if err != nil {
		c.log.Warn("nbd: listing exports", "err", err)
		return c.optReply(optList, repErrPlatform, []byte("cannot list exports"))
	}
	for _, e := range list {
		if !validName([]byte(e.Name)) {
			continue
		}
		b := make([]byte, 4+len(e.Name))
		binary.BigEndian.PutUint32(b, uint32(len(e.Name)))
		copy(b[4:], e.Name)
		if err := c.optReply(optList, repServer, b); err != nil {
			return err
		}
	}
	return c.optReply(optList, repAck, nil)
}

// optInfoGo handles NBD_OPT_INFO and NBD_OPT_GO. It returns true when GO
// succeeded and transmission starts.
func (c *conn) optInfoGo(opt uint32, data []byte) (bool, error) {
	// u32 name length, name, u16 count, count × u16 info type.
	if len(data) < 6 {
		return false, c.optReply(opt, repErrInvalid, []byte("short request"))
	}
	nl := binary.BigEndian.Uint32(data)
	if uint64(nl) > uint64(len(data)-6) {
		return false, c.optReply(opt, repErrInvalid, []byte("bad name length"))
	}
	name := data[4 : 4+nl]
	rest := data[4+nl:]
	nreq := int(binary.BigEndian.Uint16(rest))
	if len(rest) != 2+2*nreq {
		return false, c.optReply(opt, repErrInvalid, []byte("bad information request count"))
	}
	if !validName(name) {
		return false, c.optReply(opt, repErrInvalid, []byte("invalid export name"))
	}
	var wantName, wantDesc bool
	for i := range nreq {
		switch binary.BigEndian.Uint16(rest[2+2*i:]) {
		case infoName:
			wantName = true
		case infoDescription:
			wantDesc = true
		}
	}

	exp, resolved, size, err := c.open(string(name))
	if err != nil {
		if errors.Is(err, ErrNoSuchExport) {
			return false, c.optReply(opt, repErrUnknown, []byte("no such export"))
		}
		c.log.Warn("nbd: opening export", "export", string(name), "err", err)
		return false, c.optReply(opt, repErrPlatform, []byte("cannot open export"))
	}
	keep := false
	defer func() {
		if !keep {
			exp.Close()
		}
	}()

	var b [14]byte
	binary.BigEndian.PutUint16(b[0:], infoExport)
	binary.BigEndian.PutUint64(b[2:], uint64(size))
	binary.BigEndian.PutUint16(b[10:], c.transmissionFlags())
	if err := c.optReply(opt, repInfo, b[:12]); err != nil {
		return false, err
	}
	binary.BigEndian.PutUint16(b[0:], infoBlockSize)
	binary.BigEndian.PutUint32(b[2:], 1)
	binary.BigEndian.PutUint32(b[6:], uint32(c.preferredBlockSize(exp)))
	binary.BigEndian.PutUint32(b[10:], uint32(c.s.o.MaxRequest))
	if err := c.optReply(opt, repInfo, b[:14]); err != nil {
		return false, err
	}
	if wantName {
		if err := c.optReply(opt, repInfo, append([]byte{0, byte(infoName)}, resolved...)); err != nil {
			return false, err
		}
	}
	if wantDesc {
		if err := c.optReply(opt, repInfo, append([]byte{0, byte(infoDescription)}, resolved...)); err != nil {
			return false, err
		}
	}
	if opt == optInfo {
		// Close before the ACK so that the export is released when the
		// client sees the answer.
		keep = true
		if err := exp.Close(); err != nil {
			c.log.Warn("nbd: closing export", "export", resolved, "err", err)
		}
		return false, c.optReply(opt, repAck, nil)
	}
	if err := c.optReply(opt, repAck, nil); err != nil {
		return false, err
	}
	keep = true
	c.setExport(exp, resolved, size)
	return true, nil
}

// setExport records the export the transmission phase serves. Meta
// contexts selected for another export are dropped.
func (c *conn) setExport(exp Export, name string, size int64) {
	c.exp, c.name, c.size = exp, name, size
	if c.metaExport != name {
		c.metaAlloc = false
	}
}

// preferredBlockSize is the export's preferred block size if it is a power
// of two of at least 512 bytes, else 4096, and never more than MaxRequest.
func (c *conn) preferredBlockSize(exp Export) int {
	bs := exp.BlockSize()
	if bs < 512 || bs&(bs-1) != 0 {
		bs = preferredBlockSize
	}
	return min(bs, c.s.o.MaxRequest)
}
