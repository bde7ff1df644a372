package nbd

import (
	"encoding/binary"
	"errors"
)

// Meta contexts (NBD_OPT_LIST_META_CONTEXT, NBD_OPT_SET_META_CONTEXT). The
// server knows one: base:allocation, whose NBD_CMD_BLOCK_STATUS replies
// say which ranges are holes (NBD_STATE_HOLE|NBD_STATE_ZERO) and which
// hold data (0), from Export.Extents.

// metaRequest is a parsed LIST/SET_META_CONTEXT payload: u32 export name
// length, name, u32 query count, then count × (u32 length, string).
type metaRequest struct {
	export  string
	queries []string
}

// parseMetaRequest parses a LIST/SET_META_CONTEXT payload; the string is
// the reason it is malformed.
func parseMetaRequest(data []byte) (metaRequest, string) {
	var m metaRequest
	name, rest, ok := cutString(data)
	if !ok || len(rest) < 4 {
		return m, "bad export name"
	}
	if !validName(name) {
		return m, "invalid export name"
	}
	m.export = string(name)
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if n > maxMetaQueries {
		return m, "too many queries"
	}
	for range n {
		var q []byte
		q, rest, ok = cutString(rest)
		if !ok {
			return m, "bad query length"
		}
		if !validName(q) {
			return m, "invalid query"
		}
		m.queries = append(m.queries, string(q))
	}
	if len(rest) != 0 {
		return m, "trailing data"
	}
	return m, ""
}

// cutString splits a string prefixed by its u32 length off b.
func cutString(b []byte) (s, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, false
	}
	return b[4 : 4+n], b[4+n:], true
}

// matchesAlloc reports whether the queries select base:allocation. An
// empty list selects every context for LIST and none for SET; "base:"
// names the whole namespace, but only for LIST.
func (m metaRequest) matchesAlloc(list bool) bool {
	if len(m.queries) == 0 {
		return list
	}
	for _, q := range m.queries {
		if q == metaBaseAlloc || (list && q == metaBaseNamespace) {
			return true
		}
	}
	return false
}

// optMetaContext handles NBD_OPT_LIST_META_CONTEXT and
// NBD_OPT_SET_META_CONTEXT. SET needs structured replies first; it
// replaces the selection, which applies only to the export it names.
func (c *conn) optMetaContext(opt uint32, data []byte) error {
	list := opt == optListMetaContext
	if !list && !c.structured {
		return c.optReply(opt, repErrInvalid, []byte("NBD_OPT_STRUCTURED_REPLY must come first"))
	}
	m, bad := parseMetaRequest(data)
	if bad != "" {
		return c.optReply(opt, repErrInvalid, []byte(bad))
	}
	exp, resolved, _, err := c.open(m.export)
	if err != nil {
		if errors.Is(err, ErrNoSuchExport) {
			return c.optReply(opt, repErrUnknown, []byte("no such export"))
		}
		c.log.Warn("nbd: opening export", "export", m.export, "err", err)
		return c.optReply(opt, repErrPlatform, []byte("cannot open export"))
	}
	if err := exp.Close(); err != nil {
		c.log.Warn("nbd: closing export", "export", resolved, "err", err)
	}
	alloc := m.matchesAlloc(list)
	if !list {
		c.metaExport, c.metaAlloc = resolved, alloc
	}
	if alloc {
		// LIST answers with context id 0; SET with the id replies use.
		id := uint32(0)
		if !list {
			id = metaAllocID
		}
		b := binary.BigEndian.AppendUint32(nil, id)
		if err := c.optReply(opt, repMeta, append(b, metaBaseAlloc...)); err != nil {
			return err
		}
	}
	return c.optReply(opt, repAck, nil)
}
