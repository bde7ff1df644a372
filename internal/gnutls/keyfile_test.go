package gnutls

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseKeyFile(t *testing.T) {
	ids, err := ParseKeyFile([]byte("alice:00ff10\r\n\nbob:abcdef0123\n"))
	if err != nil || !reflect.DeepEqual(ids, []string{"alice", "bob"}) {
		t.Fatalf("ParseKeyFile = %q, %v", ids, err)
	}
	for in, want := range map[string]string{
		"":                       "no key",
		"\n  \n":                 "no key",
		"alice00ff\n":            "line 1: want identity:hexkey",
		":00ff\n":                "line 1: empty identity",
		"alice:\n":               "line 1: empty key",
		"alice:00ff\nbob:xyz\n":  "line 2: key for \"bob\" is not hex",
		"alice:0ff\n":            "not hex",
		"alice:00ff\nalice:11\n": "line 2: identity \"alice\" given twice",
	} {
		if _, err := ParseKeyFile([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseKeyFile(%q) = %v, want an error with %q", in, err, want)
		}
	}
}
