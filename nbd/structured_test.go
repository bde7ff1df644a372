package nbd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// metaData is a LIST/SET_META_CONTEXT payload.
func metaData(export string, queries ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(export)))
	b = append(b, export...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(queries)))
	for _, q := range queries {
		b = binary.BigEndian.AppendUint32(b, uint32(len(q)))
		b = append(b, q...)
	}
	return b
}

// metaContexts sends a LIST or SET_META_CONTEXT and returns the contexts
// replied (id → name) and the final reply type (ACK or an error).
func (c *testClient) metaContexts(opt uint32, data []byte) (map[string]uint32, uint32) {
	c.t.Helper()
	c.sendOpt(opt, data)
	got := map[string]uint32{}
	for {
		r, err := c.readOptReply()
		if err != nil {
			c.t.Fatalf("reply to option %d: %v", opt, err)
		}
		if r.typ != repMeta {
			return got, r.typ
		}
		if len(r.data) < 4 {
			c.t.Fatalf("short NBD_REP_META_CONTEXT %x", r.data)
		}
		got[string(r.data[4:])] = binary.BigEndian.Uint32(r.data)
	}
}

// connectStructured negotiates structured replies and base:allocation for
// export, then GO.
func connectStructured(t testing.TB, addr, export string) (*testClient, infoResult) {
	t.Helper()
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	c.sendOpt(optStructuredReply, nil)
	if r, err := c.readOptReply(); err != nil || r.typ != repAck {
		t.Fatalf("STRUCTURED_REPLY: %+v %v", r, err)
	}
	ctxs, typ := c.metaContexts(optSetMetaContext, metaData(export, metaBaseAlloc))
	if typ != repAck || ctxs[metaBaseAlloc] != metaAllocID || len(ctxs) != 1 {
		t.Fatalf("SET_META_CONTEXT: %v %#x", ctxs, typ)
	}
	res := c.infoGo(optGo, export)
	if res.errType != 0 {
		t.Fatalf("GO: %#x", res.errType)
	}
	return c, res
}

// chunk is one structured reply chunk.
type chunk struct {
	flags, typ uint16
	handle     uint64
	payload    []byte
}

func (c *testClient) readChunk() (chunk, error) {
	h, err := c.readN(structHeaderSize)
	if err != nil {
		return chunk{}, err
	}
	if m := binary.BigEndian.Uint32(h); m != structReplyMagic {
		return chunk{}, fmt.Errorf("structured reply magic %#x", m)
	}
	k := chunk{flags: binary.BigEndian.Uint16(h[4:]), typ: binary.BigEndian.Uint16(h[6:]),
		handle: binary.BigEndian.Uint64(h[8:])}
	n := binary.BigEndian.Uint32(h[16:])
	if n > 64<<20 {
		return k, fmt.Errorf("chunk length %d", n)
	}
	k.payload, err = c.readN(int(n))
	return k, err
}

// structuredCmd sends one request and reads its chunks up to DONE.
func (c *testClient) structuredCmd(typ, flags uint16, off uint64, length uint32, payload []byte) []chunk {
	c.t.Helper()
	handleSeq++
	h := handleSeq
	if err := c.send(typ, flags, h, off, length, payload); err != nil {
		c.t.Fatal(err)
	}
	var out []chunk
	for {
		k, err := c.readChunk()
		if err != nil {
			c.t.Fatalf("%s: %v", cmdName(typ), err)
		}
		if k.handle != h {
			c.t.Fatalf("chunk for handle %d, want %d", k.handle, h)
		}
		out = append(out, k)
		if k.flags&replyFlagDone != 0 {
			return out
		}
	}
}

// chunkErrno is the error of a reply's chunks (0 when none).
func chunkErrno(t testing.TB, ks []chunk) uint32 {
	for _, k := range ks {
		if k.typ&(1<<15) != 0 {
			if len(k.payload) < 6 {
				t.Fatalf("short error chunk %x", k.payload)
			}
			return binary.BigEndian.Uint32(k.payload)
		}
	}
	return 0
}

// statusDesc is one block status descriptor.
type statusDesc struct {
	length, flags uint32
}

func blockStatusOf(t testing.TB, ks []chunk) []statusDesc {
	t.Helper()
	if len(ks) != 1 || ks[0].typ != replyTypeBlockStatus {
		t.Fatalf("BLOCK_STATUS reply: %d chunks, first type %d", len(ks), ks[0].typ)
	}
	p := ks[0].payload
	if len(p) < 12 || (len(p)-4)%8 != 0 || binary.BigEndian.Uint32(p) != metaAllocID {
		t.Fatalf("BLOCK_STATUS payload %x", p)
	}
	var out []statusDesc
	for p = p[4:]; len(p) > 0; p = p[8:] {
		out = append(out, statusDesc{binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])})
	}
	return out
}

// readChunks reassembles a structured READ of length bytes at off.
func readChunks(t testing.TB, ks []chunk, off uint64, length uint32) (data []byte, holes int) {
	t.Helper()
	data = bytes.Repeat([]byte{0xa5}, int(length)) // anything not covered shows
	covered := 0
	for _, k := range ks {
		switch k.typ {
		case replyTypeOffsetData:
			o := binary.BigEndian.Uint64(k.payload) - off
			copy(data[o:], k.payload[8:])
			covered += len(k.payload) - 8
		case replyTypeOffsetHole:
			o := binary.BigEndian.Uint64(k.payload) - off
			n := binary.BigEndian.Uint32(k.payload[8:])
			clear(data[o : o+uint64(n)])
			covered += int(n)
			holes++
		case replyTypeNone:
		default:
			t.Fatalf("READ chunk type %d", k.typ)
		}
	}
	if covered != int(length) {
		t.Fatalf("READ chunks cover %d bytes, want %d", covered, length)
	}
	return data, holes
}

func TestMetaContextOptions(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	for _, tc := range []struct {
		name string
		opt  uint32
		data []byte
		want map[string]uint32
		typ  uint32
	}{
		{"list all", optListMetaContext, metaData("disk"), map[string]uint32{metaBaseAlloc: 0}, repAck},
		{"list namespace", optListMetaContext, metaData("disk", "base:"), map[string]uint32{metaBaseAlloc: 0}, repAck},
		{"list unknown", optListMetaContext, metaData("disk", "qemu:dirty-bitmap:x", "base:nope"), map[string]uint32{}, repAck},
		{"list unknown export", optListMetaContext, metaData("nope", metaBaseAlloc), map[string]uint32{}, repErrUnknown},
		{"set before structured", optSetMetaContext, metaData("disk", metaBaseAlloc), map[string]uint32{}, repErrInvalid},
		{"malformed", optListMetaContext, []byte{0, 0, 0, 9, 'x'}, map[string]uint32{}, repErrInvalid},
		{"trailing bytes", optListMetaContext, append(metaData("disk"), 1), map[string]uint32{}, repErrInvalid},
		{"query too long", optListMetaContext, append(metaData("disk")[:8], 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff), map[string]uint32{}, repErrInvalid},
	} {
		got, typ := c.metaContexts(tc.opt, tc.data)
		if typ != tc.typ || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: contexts %v reply %#x, want %v %#x", tc.name, got, typ, tc.want, tc.typ)
		}
	}
	c.sendOpt(optStructuredReply, []byte{1})
	if r, _ := c.readOptReply(); r.typ != repErrInvalid {
		t.Errorf("STRUCTURED_REPLY with data: %#x", r.typ)
	}
	c.sendOpt(optStructuredReply, nil)
	if r, _ := c.readOptReply(); r.typ != repAck {
		t.Errorf("STRUCTURED_REPLY: %#x", r.typ)
	}
	if got, typ := c.metaContexts(optSetMetaContext, metaData("disk", "base:")); typ != repAck || len(got) != 0 {
		t.Errorf("SET base: (a namespace is not a context for SET): %v %#x", got, typ)
	}
	// Selected for "other", then GO to "disk": no context is active.
	if got, typ := c.metaContexts(optSetMetaContext, metaData("other", metaBaseAlloc)); typ != repAck || got[metaBaseAlloc] != metaAllocID {
		t.Fatalf("SET: %v %#x", got, typ)
	}
	res := c.infoGo(optGo, "disk")
	if res.errType != 0 || res.tflags&tflagSendDF == 0 {
		t.Fatalf("GO: %+v", res)
	}
	if e := chunkErrno(t, c.structuredCmd(cmdBlockStatus, 0, 0, 4096, nil)); e != errnoInval {
		t.Fatalf("BLOCK_STATUS without a context for this export: errno %d", e)
	}
}

func TestBlockStatus(t *testing.T) {
	b := twoExports()
	e := b.export("disk")
	size, _ := e.Size()
	// Data in blocks 1, 2 and 5; the rest is zero.
	for _, blk := range []int64{1, 2, 5} {
		e.WriteAt(t.Context(), bytes.Repeat([]byte{byte(blk)}, memBlock), blk*memBlock)
	}
	_, addr := startServer(t, b, Options{})
	c, res := connectStructured(t, addr, "disk")
	if res.pref != memBlock || res.min != 1 {
		t.Fatalf("block size %d/%d/%d", res.min, res.pref, res.max)
	}
	H, D := stateHole|stateZero, uint32(0)
	check := func(name string, flags uint16, off uint64, length uint32, want []statusDesc) {
		t.Helper()
		got := blockStatusOf(t, c.structuredCmd(cmdBlockStatus, flags, off, length, nil))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	check("start", 0, 0, 8*memBlock, []statusDesc{{memBlock, H}, {2 * memBlock, D}, {2 * memBlock, H}, {memBlock, D}, {2 * memBlock, H}})
	check("unaligned", 0, 100, memBlock, []statusDesc{{memBlock - 100, H}, {100, D}})
	check("req one", cmdFlagReqOne, memBlock+10, 6*memBlock, []statusDesc{{2*memBlock - 10, D}})
	// The export answers at most memMaxExtents extents per call; the
	// server asks again and covers the whole request.
	for blk := int64(10); blk < 40; blk += 2 {
		e.WriteAt(t.Context(), []byte{1}, blk*memBlock)
	}
	got := blockStatusOf(t, c.structuredCmd(cmdBlockStatus, 0, 10*memBlock, 30*memBlock, nil))
	if len(got) != 30 {
		t.Errorf("alternating blocks: %d descriptors, want 30", len(got))
	}
	check("to the end", 0, uint64(size-memBlock), memBlock, []statusDesc{{memBlock, H}})
	for _, tc := range []struct {
		name   string
		flags  uint16
		off    uint64
		length uint32
	}{
		{"past end", 0, uint64(size), 1},
		{"overflow", 0, 1 << 63, 1},
		{"zero length", 0, 0, 0},
		{"unknown flag", cmdFlagNoHole, 0, 4096},
	} {
		if e := chunkErrno(t, c.structuredCmd(cmdBlockStatus, tc.flags, tc.off, tc.length, nil)); e != errnoInval {
			t.Errorf("%s: errno %d, want EINVAL", tc.name, e)
		}
	}
	// Simple-reply connections have no context: EINVAL.
	plain, _ := connect(t, addr, "disk")
	if errno, _ := plain.cmd(cmdBlockStatus, 0, 0, 4096, nil); errno != errnoInval {
		t.Errorf("BLOCK_STATUS without structured replies: errno %d", errno)
	}
}

func TestStructuredCommands(t *testing.T) {
	b := twoExports()
	e := b.export("disk")
	want := make([]byte, 256<<10)
	for i := range 3 {
		copy(want[(10+20*i)*memBlock:], bytes.Repeat([]byte{byte(i + 1)}, 3*memBlock+7))
	}
	e.WriteAt(t.Context(), want, 0)
	_, addr := startServer(t, b, Options{})
	c, _ := connectStructured(t, addr, "disk")

	got, holes := readChunks(t, c.structuredCmd(cmdRead, 0, 0, uint32(len(want)), nil), 0, uint32(len(want)))
	if !bytes.Equal(got, want) || holes < 3 {
		t.Fatalf("large structured READ: %d holes, %s", holes, diffAt(got, want))
	}
	ks := c.structuredCmd(cmdRead, cmdFlagDF, 0, uint32(len(want)), nil)
	if got, holes := readChunks(t, ks, 0, uint32(len(want))); len(ks) != 1 || holes != 0 || !bytes.Equal(got, want) {
		t.Fatalf("READ with DF: %d chunks, %d holes", len(ks), holes)
	}
	off := uint64(10*memBlock - 3)
	got, _ = readChunks(t, c.structuredCmd(cmdRead, 0, off, 100, nil), off, 100)
	if !bytes.Equal(got, want[off:off+100]) {
		t.Fatalf("small structured READ: %s", diffAt(got, want[off:off+100]))
	}
	if ks := c.structuredCmd(cmdWrite, cmdFlagFUA, 0, 4, []byte("abcd")); len(ks) != 1 || ks[0].typ != replyTypeNone {
		t.Fatalf("WRITE: %+v", ks)
	}
	if string(e.bytes(0, 4)) != "abcd" || b.flushes.Load() != 1 {
		t.Fatalf("WRITE FUA not applied: %q, %d flushes", e.bytes(0, 4), b.flushes.Load())
	}
	for _, tc := range []struct {
		name       string
		typ, flags uint16
		off        uint64
		length     uint32
		payload    []byte
		errno      uint32
	}{
		{"read past end", cmdRead, 0, testSize, 1, nil, errnoInval},
		{"read too long", cmdRead, 0, 0, 64 << 20, nil, errnoInval},
		{"write past end", cmdWrite, 0, testSize - 1, 2, []byte{1, 2}, errnoNoSpc},
		{"unknown command", 42, 0, 0, 0, nil, errnoInval},
		{"cache", cmdCache, 0, 0, 1, nil, errnoInval},
		{"flush", cmdFlush, 0, 0, 0, nil, errnoOK},
	} {
		if got := chunkErrno(t, c.structuredCmd(tc.typ, tc.flags, tc.off, tc.length, tc.payload)); got != tc.errno {
			t.Errorf("%s: errno %d, want %d", tc.name, got, tc.errno)
		}
	}
}
