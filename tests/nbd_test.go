package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNBDExport: a file in /.nbd/ is an NBD export; data written over NBD
// is visible through the mount and survives a restart; real clients
// (nbdinfo, nbdcopy, nbdfuse + mkfs.ext4 + e2fsck) work against it.
func TestNBDExport(t *testing.T) {
	t.Parallel()
	need(t, "nbdinfo", "nbdcopy", "truncate")
	e := newEnv(t)
	e.init()
	p := e.mount()
	const size = 64 << 20
	if r := e.run("truncate", "-s", strconv.Itoa(size), e.path(".nbd/disk0")); r.code != 0 {
		t.Fatalf("truncate: %s", r)
	}
	uri := "nbd://" + e.nbdAddr + "/disk0"
	r := e.run("nbdinfo", "--size", uri)
	if r.code != 0 || strings.TrimSpace(r.stdout) != strconv.Itoa(size) {
		t.Fatalf("nbdinfo --size: %s", r)
	}
	r = e.run("nbdinfo", "--list", "nbd://"+e.nbdAddr)
	if r.code != 0 || !strings.Contains(r.stdout, `export="disk0"`) {
		t.Fatalf("nbdinfo --list: %s", r)
	}
	sock := filepath.Join(e.cache, "nbd.sock")
	if r := e.run("nbdinfo", "--size", "nbd+unix:///disk0?socket="+sock); r.code != 0 || strings.TrimSpace(r.stdout) != strconv.Itoa(size) {
		t.Fatalf("nbdinfo over the unix socket: %s", r)
	}
	if r := e.run("nbdinfo", "--size", "nbd://"+e.nbdAddr+"/missing"); r.code == 0 {
		t.Fatalf("a missing export was served: %s", r)
	}

	// Write 4 MiB of random data at offset 0 over NBD, flush included.
	src := filepath.Join(e.dir, "src.raw")
	data := randBytes(t, 4<<20)
	writeFile(t, src, data)
	if r := e.run("nbdcopy", "--flush", src, uri); r.code != 0 {
		t.Fatalf("nbdcopy to the export: %s", r)
	}
	img := readFile(t, e.path(".nbd/disk0"))
	if len(img) != size || !bytes.Equal(img[:len(data)], data) || !bytes.Equal(img[len(data):len(data)+4096], make([]byte, 4096)) {
		t.Fatalf("the file behind the export does not hold what nbdcopy wrote (len %d)", len(img))
	}
	dst := filepath.Join(e.dir, "dst.raw")
	if r := e.run("nbdcopy", uri, dst); r.code != 0 {
		t.Fatalf("nbdcopy from the export: %s", r)
	}
	back := readFile(t, dst)
	if !bytes.Equal(back[:len(data)], data) {
		t.Fatal("data read back over NBD differs")
	}

	// qemu's NBD client: compare, write a pattern, zero a range, flush.
	if haveAll("qemu-img", "qemu-io") {
		if r := e.run("qemu-img", "compare", "-f", "raw", "-F", "raw", src, uri); r.code != 0 {
			t.Fatalf("qemu-img compare: %s", r)
		}
		r := e.run("qemu-io", "-f", "raw", "-c", "write -P 0x5a 8M 1M", "-c", "write -z 8704K 64K", "-c", "flush", uri)
		if r.code != 0 || strings.Contains(r.stdout+r.stderr, "failed") {
			t.Fatalf("qemu-io: %s", r)
		}
		img := readFile(t, e.path(".nbd/disk0"))
		want := bytes.Repeat([]byte{0x5a}, 1<<20)
		clear(want[512<<10 : 576<<10])
		if !bytes.Equal(img[8<<20:9<<20], want) {
			t.Fatal("qemu-io's pattern and zeroed range are not in the file")
		}
	} else if inCI() {
		t.Fatal("qemu-img or qemu-io missing; scripts/install-deps.sh installs them")
	}

	// A filesystem on the export through a real block-device client.
	if haveAll("nbdfuse", "mkfs.ext4", "e2fsck") {
		fuseDir := filepath.Join(e.dir, "nbdfuse")
		if err := os.Mkdir(fuseDir, 0o755); err != nil {
			t.Fatal(err)
		}
		nf := e.command(t.Context(), "nbdfuse", fuseDir, uri)
		if err := nf.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			e.run("fusermount3", "-u", fuseDir)
			nf.Process.Kill()
			nf.Wait()
		})
		dev := filepath.Join(fuseDir, "nbd")
		deadline := time.Now().Add(30 * time.Second)
		for {
			if fi, err := os.Stat(dev); err == nil && fi.Size() == size {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("nbdfuse did not expose the export")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if r := e.run("mkfs.ext4", "-q", "-F", dev); r.code != 0 {
			t.Fatalf("mkfs.ext4 on the export: %s", r)
		}
		if r := e.run("e2fsck", "-f", "-n", dev); r.code != 0 {
			t.Fatalf("e2fsck on the export: %s", r)
		}
		if r := e.run("fusermount3", "-u", fuseDir); r.code != 0 {
			t.Fatalf("fusermount3 -u nbdfuse: %s", r)
		}
		nf.Wait()
	} else if inCI() {
		t.Fatal("nbdfuse, mkfs.ext4 or e2fsck missing; scripts/install-deps.sh installs them")
	}
	snapshot := readFile(t, e.path(".nbd/disk0"))
	p.stop()

	// Everything NBD wrote survives a restart.
	p = e.mount()
	if got := readFile(t, e.path(".nbd/disk0")); !bytes.Equal(got, snapshot) {
		t.Fatal("the export's contents changed across a restart")
	}
	if haveAll("e2fsck") && snapshot[1080] == 0x53 && snapshot[1081] == 0xef { // ext4 superblock magic
		img := filepath.Join(e.dir, "img.raw")
		if r := e.run("nbdcopy", uri, img); r.code != 0 {
			t.Fatalf("nbdcopy after restart: %s", r)
		}
		if r := e.run("e2fsck", "-f", "-n", img); r.code != 0 {
			t.Fatalf("e2fsck after restart: %s", r)
		}
	}
	p.stop()
}

func haveAll(tools ...string) bool {
	for _, tool := range tools {
		if _, err := lookPath(tool); err != nil {
			return false
		}
	}
	return true
}
