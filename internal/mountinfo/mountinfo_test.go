package mountinfo

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	in := []byte(`22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw
98 22 0:50 / /tmp/with\040space rw,nosuid,nodev,relatime shared:1 master:2 - fuse.ebbfs ebbfs rw,user_id=0,group_id=0
garbage line
99 22 0:51 / /mnt/x rw - fuse.ebbfs /etc/ebbfs\040x.toml rw
`)
	got := Parse(in)
	want := []Entry{
		{Dev: "0:21", Mountpoint: "/proc", FSType: "proc", Source: "proc", Options: "rw,nosuid", Super: "rw"},
		{Dev: "0:50", Mountpoint: "/tmp/with space", FSType: "fuse.ebbfs", Source: "ebbfs", Options: "rw,nosuid,nodev,relatime", Super: "rw,user_id=0,group_id=0"},
		{Dev: "0:51", Mountpoint: "/mnt/x", FSType: "fuse.ebbfs", Source: "/etc/ebbfs x.toml", Options: "rw", Super: "rw"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for in, want := range map[string]string{`a\040b`: "a b", `\134`: `\`, `x\01`: `x\01`, `\999`: `\999`, `tail\`: `tail\`} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadFindsRoot(t *testing.T) {
	m, ok := Holding("/etc/hostname")
	if !ok || m.FSType == "" {
		t.Fatalf("no mount holds /etc/hostname: %+v", m)
	}
	if _, ok, err := Find("/"); err != nil || !ok {
		t.Fatalf("Find(/) = %v, %v", ok, err)
	}
}
