package nbd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

const testSize = 1 << 20

func twoExports() *memBackend {
	return newMemBackend(map[string]int64{"disk": testSize, "other": 3 * 4096})
}

func TestHandshakeGo(t *testing.T) {
	b := twoExports()
	_, addr := startServer(t, b, Options{MaxRequest: 1 << 20})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	res := c.infoGo(optGo, "disk", infoName, infoDescription, infoBlockSize)
	if res.errType != 0 {
		t.Fatalf("error reply %#x", res.errType)
	}
	if res.size != testSize {
		t.Errorf("size %d, want %d", res.size, testSize)
	}
	want := tflagHasFlags | tflagSendFlush | tflagSendFUA | tflagSendTrim | tflagSendWriteZeroes | tflagCanMultiConn
	if res.tflags != want {
		t.Errorf("transmission flags %#x, want %#x", res.tflags, want)
	}
	if res.min != 1 || res.pref != 4096 || res.max != 1<<20 {
		t.Errorf("block sizes %d/%d/%d", res.min, res.pref, res.max)
	}
	if !res.gotName || res.name != "disk" || !res.gotDesc {
		t.Errorf("name %v %q, description %v", res.gotName, res.name, res.gotDesc)
	}
	if errno, _ := c.cmd(cmdWrite, 0, 4096, 3, []byte("abc")); errno != 0 {
		t.Fatalf("WRITE errno %d", errno)
	}
	if errno, data := c.cmd(cmdRead, 0, 4095, 5, nil); errno != 0 || !bytes.Equal(data, []byte("\x00abc\x00")) {
		t.Fatalf("READ errno %d data %q", errno, data)
	}
	if got := b.export("disk").bytes(4096, 3); string(got) != "abc" {
		t.Fatalf("backend has %q", got)
	}
	if err := c.send(cmdDisc, 0, 99, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	c.expectClosed()
}

func TestHandshakeGoNoInfoRequests(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle)
	res := c.infoGo(optGo, "other")
	if res.errType != 0 || res.size != 3*4096 {
		t.Fatalf("result %+v", res)
	}
	if res.gotName || res.gotDesc {
		t.Errorf("unrequested name/description sent")
	}
	if res.max != defaultMaxRequest {
		t.Errorf("max block size %d, want default %d", res.max, defaultMaxRequest)
	}
}

func TestHandshakeExportName(t *testing.T) {
	for _, noZeroes := range []bool{true, false} {
		_, addr := startServer(t, twoExports(), Options{})
		c := dialClient(t, addr)
		flags := clientFlagFixedNewstyle
		if noZeroes {
			flags |= clientFlagNoZeroes
		}
		c.start(flags)
		c.sendOpt(optExportName, []byte("other"))
		n := 10
		if !noZeroes {
			n += 124
		}
		b, err := c.readN(n)
		if err != nil {
			t.Fatal(err)
		}
		if sz := binary.BigEndian.Uint64(b); sz != 3*4096 {
			t.Errorf("size %d", sz)
		}
		if f := binary.BigEndian.Uint16(b[8:]); f&tflagHasFlags == 0 || f&tflagCanMultiConn == 0 {
			t.Errorf("flags %#x", f)
		}
		if !bytes.Equal(b[10:], make([]byte, n-10)) {
			t.Errorf("padding not zero")
		}
		// The next bytes must be transmission replies, not padding.
		if errno, data := c.cmd(cmdRead, 0, 0, 8, nil); errno != 0 || len(data) != 8 {
			t.Fatalf("READ errno %d len %d", errno, len(data))
		}
	}
}

func TestHandshakeExportNameUnknownCloses(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	for _, name := range []string{"nope", ""} { // "" is ambiguous with two exports
		c := dialClient(t, addr)
		c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
		c.sendOpt(optExportName, []byte(name))
		c.expectClosed()
	}
}

func TestHandshakeList(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	c.sendOpt(optList, nil)
	var names []string
	for {
		r, err := c.readOptReply()
		if err != nil {
			t.Fatal(err)
		}
		if r.typ == repAck {
			break
		}
		if r.typ != repServer || r.opt != optList {
			t.Fatalf("reply %+v", r)
		}
		n := binary.BigEndian.Uint32(r.data)
		if int(n) > len(r.data)-4 {
			t.Fatalf("bad name length %d in %x", n, r.data)
		}
		names = append(names, string(r.data[4:4+n]))
	}
	if len(names) != 2 || names[0] != "disk" || names[1] != "other" {
		t.Fatalf("names %q", names)
	}
	c.sendOpt(optList, []byte("x"))
	if r, err := c.readOptReply(); err != nil || r.typ != repErrInvalid {
		t.Fatalf("LIST with data: %+v %v", r, err)
	}
	// The connection is still usable.
	if res := c.infoGo(optGo, "disk"); res.errType != 0 {
		t.Fatalf("GO after LIST: %#x", res.errType)
	}
}

func TestHandshakeListError(t *testing.T) {
	b := twoExports()
	b.listErr = errors.New("boom")
	_, addr := startServer(t, b, Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	c.sendOpt(optList, nil)
	if r, err := c.readOptReply(); err != nil || r.typ&repFlagError == 0 {
		t.Fatalf("LIST with failing backend: %+v %v", r, err)
	}
}

func TestHandshakeInfoThenGo(t *testing.T) {
	b := twoExports()
	_, addr := startServer(t, b, Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	res := c.infoGo(optInfo, "disk", infoName)
	if res.errType != 0 || res.size != testSize || res.name != "disk" {
		t.Fatalf("INFO %+v", res)
	}
	if b.opens.Load() != 1 || b.closes.Load() != 1 {
		t.Errorf("INFO left the export open: opens %d closes %d", b.opens.Load(), b.closes.Load())
	}
	if res := c.infoGo(optGo, "other"); res.errType != 0 || res.size != 3*4096 {
		t.Fatalf("GO %+v", res)
	}
	if errno, _ := c.cmd(cmdFlush, 0, 0, 0, nil); errno != 0 {
		t.Fatalf("FLUSH errno %d", errno)
	}
}

func TestHandshakeDefaultExport(t *testing.T) {
	one := newMemBackend(map[string]int64{"only": 8192})
	_, addr := startServer(t, one, Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	res := c.infoGo(optGo, "", infoName)
	if res.errType != 0 || res.size != 8192 || res.name != "only" {
		t.Fatalf("default export: %+v", res)
	}

	_, addr2 := startServer(t, twoExports(), Options{})
	c2 := dialClient(t, addr2)
	c2.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	if res := c2.infoGo(optGo, ""); res.errType != repErrUnknown {
		t.Fatalf("empty name with two exports: %#x, want ERR_UNKNOWN", res.errType)
	}
	c3 := dialClient(t, addr)
	c3.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	c3.sendOpt(optExportName, nil)
	if b, err := c3.readN(10); err != nil || binary.BigEndian.Uint64(b) != 8192 {
		t.Fatalf("EXPORT_NAME default: %x %v", b, err)
	}
}

func TestHandshakeUnknownExport(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	for _, opt := range []uint32{optInfo, optGo} {
		if res := c.infoGo(opt, "nope"); res.errType != repErrUnknown {
			t.Fatalf("option %d unknown export: %#x", opt, res.errType)
		}
	}
	if res := c.infoGo(optGo, "disk"); res.errType != 0 {
		t.Fatalf("GO after errors: %#x", res.errType)
	}
}

func TestHandshakeUnsupportedOptions(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	for _, o := range []struct {
		opt  uint32
		data []byte
	}{
		{optStartTLS, nil}, // no TLS on this listener
		{optPeekExport, nil},
		{11, nil}, // EXTENDED_HEADERS
		{0xdeadbeef, bytes.Repeat([]byte{7}, 1000)},
	} {
		c.sendOpt(o.opt, o.data)
		r, err := c.readOptReply()
		if err != nil || r.typ != repErrUnsup || r.opt != o.opt {
			t.Fatalf("option %#x: %+v %v", o.opt, r, err)
		}
	}
	if res := c.infoGo(optGo, "disk"); res.errType != 0 {
		t.Fatalf("GO after unsupported options: %#x", res.errType)
	}
}

func TestHandshakeMalformedInfo(t *testing.T) {
	_, addr := startServer(t, twoExports(), Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	bad := [][]byte{
		nil,
		{0, 0, 0, 4, 'd', 'i'},         // name length past the end
		{0, 0, 0, 0, 0, 2, 0, 1},       // two requests announced, one sent
		{0xff, 0xff, 0xff, 0xff, 0, 0}, // huge name length
		append(goData("disk"), 0),      // trailing byte
		goData("di\x00sk"),             // NUL in name
		goData(string(bytes.Repeat([]byte{'a'}, 5000))), // over 4096 bytes
	}
	for _, opt := range []uint32{optInfo, optGo} {
		for _, d := range bad {
			c.sendOpt(opt, d)
			r, err := c.readOptReply()
			if err != nil || r.typ != repErrInvalid {
				t.Fatalf("option %d data %x: %+v %v", opt, d, r, err)
			}
		}
	}
	if res := c.infoGo(optGo, "disk"); res.errType != 0 {
		t.Fatalf("GO after malformed options: %#x", res.errType)
	}
}

func TestHandshakeAbort(t *testing.T) {
	b := twoExports()
	_, addr := startServer(t, b, Options{})
	c := dialClient(t, addr)
	c.start(clientFlagFixedNewstyle | clientFlagNoZeroes)
	c.sendOpt(optAbort, nil)
	r, err := c.readOptReply()
	if err != nil || r.typ != repAck || r.opt != optAbort {
		t.Fatalf("ABORT reply %+v %v", r, err)
	}
	c.expectClosed()
}

func TestReadOnly(t *testing.T) {
	b := twoExports()
	_, addr := startServer(t, b, Options{ReadOnly: true})
	c, res := connect(t, addr, "disk")
	if res.tflags&tflagReadOnly == 0 || res.tflags&(tflagSendTrim|tflagSendWriteZeroes|tflagSendFUA) != 0 {
		t.Fatalf("read-only flags %#x", res.tflags)
	}
	for _, tc := range []struct {
		typ     uint16
		payload []byte
	}{{cmdWrite, []byte("xyz")}, {cmdTrim, nil}, {cmdWriteZeroes, nil}} {
		if errno, _ := c.cmd(tc.typ, 0, 0, 3, tc.payload); errno != errnoPerm {
			t.Errorf("%s on read-only: errno %d, want EPERM", cmdName(tc.typ), errno)
		}
	}
	if errno, data := c.cmd(cmdRead, 0, 0, 3, nil); errno != 0 || !bytes.Equal(data, []byte{0, 0, 0}) {
		t.Fatalf("READ on read-only: %d %q", errno, data)
	}
	if errno, _ := c.cmd(cmdFlush, 0, 0, 0, nil); errno != 0 {
		t.Fatalf("FLUSH on read-only: %d", errno)
	}
	if b.writeAts.Load() != 0 {
		t.Fatal("backend written through a read-only server")
	}
}
