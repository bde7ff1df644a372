package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// jsonKey is one documented key of docs/JSON.md.
type jsonKey struct {
	typ    string // string, integer, number, boolean, time, array, object
	always bool
}

// jsonSchemas parses docs/JSON.md: each "## `ebbfs ...`" section's table
// of keys, by heading.
func jsonSchemas(t *testing.T) map[string]map[string]jsonKey {
	t.Helper()
	b, err := os.ReadFile("../docs/JSON.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([^`]+)` \\| (\\w+) \\|\\s*(\\w*)\\s*\\|")
	out := map[string]map[string]jsonKey{}
	var cur map[string]jsonKey
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			cur = map[string]jsonKey{}
			out[strings.TrimPrefix(line, "## ")] = cur
			continue
		}
		if m := row.FindStringSubmatch(line); m != nil && cur != nil {
			cur[m[1]] = jsonKey{typ: m[2], always: m[3] == "always"}
		}
	}
	return out
}

// schemaFor merges the sections whose heading contains each of heads.
func schemaFor(t *testing.T, all map[string]map[string]jsonKey, heads ...string) map[string]jsonKey {
	t.Helper()
	out := map[string]jsonKey{}
	for _, h := range heads {
		found := false
		for head, keys := range all {
			if strings.Contains(head, h) {
				found = true
				for k, v := range keys {
					out[k] = v
				}
			}
		}
		if !found {
			t.Fatalf("docs/JSON.md has no section for %q", h)
		}
	}
	return out
}

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// flattenJSON lists every key path of v with its JSON type, the way
// docs/JSON.md names them ("a.b", "a[]", "a.*" for a map's values when
// the map itself is documented as such).
func flattenJSON(v any, path string, schema map[string]jsonKey, out map[string][]any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if _, ok := schema[path+".*"]; ok {
				p = path + ".*"
				out["key:"+k] = append(out["key:"+k], nil) // a map key: any name
			} else if !snakeKey.MatchString(k) {
				out["bad key:"+p] = append(out["bad key:"+p], k)
			}
			out[p] = append(out[p], val)
			flattenJSON(val, p, schema, out)
		}
	case []any:
		for _, el := range x {
			p := path + "[]"
			out[p] = append(out[p], el)
			if path == "" {
				p = "" // a top-level array: its elements' keys are the documented ones
			}
			flattenJSON(el, p, schema, out)
		}
	}
}

// jsonType is the documented type a decoded value has.
func jsonType(v any, want string) bool {
	switch x := v.(type) {
	case string:
		if want == "time" {
			tm, err := time.Parse(time.RFC3339Nano, x)
			return err == nil && tm.Year() > 1
		}
		return want == "string"
	case float64:
		return want == "number" || want == "integer" && x == float64(int64(x))
	case bool:
		return want == "boolean"
	case []any:
		return want == "array"
	case map[string]any:
		return want == "object"
	}
	return false
}

// checkJSONSchema checks out (a command's --json output) against schema.
func checkJSONSchema(t *testing.T, what, out string, schema map[string]jsonKey) {
	t.Helper()
	checkJSONKeys(t, what, out, schema, true)
}

// checkJSONKeys is checkJSONSchema; with always false, keys documented as
// always present may be missing (status when no process runs).
func checkJSONKeys(t *testing.T, what, out string, schema map[string]jsonKey, always bool) {
	t.Helper()
	if strings.Contains(out, "0001-01-01") {
		t.Errorf("%s: a zero time in the output:\n%s", what, out)
	}
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, out)
	}
	paths := map[string][]any{}
	flattenJSON(v, "", schema, paths)
	keys := make([]string, 0, len(paths))
	for p := range paths {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, p := range keys {
		if strings.HasPrefix(p, "key:") {
			continue
		}
		if strings.HasPrefix(p, "bad key:") {
			t.Errorf("%s: key %q is not snake_case", what, strings.TrimPrefix(p, "bad key:"))
			continue
		}
		k, ok := schema[p]
		if !ok {
			t.Errorf("%s: key %q is not in docs/JSON.md", what, p)
			continue
		}
		for _, val := range paths[p] {
			if !jsonType(val, k.typ) {
				t.Errorf("%s: %s = %v, documented as %s", what, p, val, k.typ)
			}
		}
	}
	for p, k := range schema {
		// A key always present in its object: where the object is.
		parent, _ := jsonParent(p)
		if parent != "" && len(paths[parent]) == 0 {
			continue
		}
		if always && k.always && len(paths[p]) == 0 && !(p != "" && isArrayOf(v)) {
			t.Errorf("%s: key %q, documented as always present, is missing", what, p)
		}
	}
	if t.Failed() {
		t.Logf("%s:\n%s", what, out)
	}
}

// jsonParent is the path of the object that holds the key at path p ("" for
// a top-level key), as flattenJSON names it.
func jsonParent(p string) (string, bool) {
	i := strings.LastIndexByte(p, '.')
	if i < 0 {
		return "", false
	}
	return p[:i], true
}

func isArrayOf(v any) bool { a, ok := v.([]any); return ok && len(a) == 0 }

// TestJSONOutputsMatchSchema runs every command that prints data with
// --json on the real binary and checks each output against the schema
// in docs/JSON.md: documented snake_case keys of the documented types,
// no Go field name, no zero time.
func TestJSONOutputsMatchSchema(t *testing.T) {
	t.Parallel()
	all := jsonSchemas(t)
	e := newEnv(t)
	e.init()
	p := e.mount()
	for i := 0; i < 3; i++ {
		writeFile(t, e.path(fmt.Sprintf("f%d", i)), randBytes(t, 1<<20))
	}
	e.mustEbbfs("flush")
	if err := os.Remove(e.path("f0")); err != nil {
		t.Fatal(err)
	}
	e.mustEbbfs("flush")
	ckpt := schemaFor(t, all, "`ebbfs checkpoint list --json`")
	checkJSONSchema(t, "checkpoint create --json", e.mustEbbfs("checkpoint", "create", "--ttl", "10m", "--json", "short").stdout, ckpt)
	checkJSONSchema(t, "checkpoint create --persistent --json", e.mustEbbfs("checkpoint", "create", "--persistent", "--json", "keep").stdout, ckpt)
	checkJSONSchema(t, "checkpoint list --json", e.mustEbbfs("checkpoint", "list", "--json").stdout, ckpt)
	checkJSONSchema(t, "checkpoint info --json", e.mustEbbfs("checkpoint", "info", "--json", "keep").stdout, ckpt)
	run := schemaFor(t, all, "`ebbfs reclaim run --json`", "Store requests")
	checkJSONSchema(t, "reclaim run --json (paused)", e.mustEbbfs("reclaim", "run", "--json").stdout, run)
	checkJSONSchema(t, "space --json", e.mustEbbfs("space", "--json").stdout, schemaFor(t, all, "`ebbfs space --json`"))
	e.mustEbbfs("checkpoint", "delete", "keep")
	checkJSONSchema(t, "reclaim run --json", e.mustEbbfs("reclaim", "run", "--json").stdout, run)
	checkJSONSchema(t, "reclaim sweep --json", e.mustEbbfs("reclaim", "sweep", "--json").stdout, schemaFor(t, all, "`ebbfs reclaim sweep --json`", "Store requests"))
	status := schemaFor(t, all, "`ebbfs status --json`")
	checkJSONSchema(t, "status --json", e.mustEbbfs("status", "--json").stdout, status)

	// A replica's status has its own keys.
	r := e.sameStore()
	rp := r.mount("--read-only")
	checkJSONSchema(t, "status --json (replica)", r.mustEbbfs("status", "--json").stdout, status)
	rp.stop()
	p.stop()

	// No process: what was left behind (nothing, after a clean stop).
	res := e.ebbfs("status", "--json")
	if res.code != 1 {
		t.Fatalf("status --json without a process: %s", res)
	}
	checkJSONKeys(t, "status --json (not running)", res.stdout, status, false)
	if !strings.Contains(res.stdout, `"running": false`) || !strings.Contains(res.stdout, `"left_behind": []`) {
		t.Fatalf("status --json after a clean stop: %s", res)
	}
	checkJSONSchema(t, "checkpoint list --json (from the store)", e.mustEbbfs("checkpoint", "list", "--json").stdout, ckpt)
	checkJSONSchema(t, "fsck --verify-data --json", e.mustEbbfs("fsck", "--verify-data", "--json").stdout, schemaFor(t, all, "`ebbfs fsck --json`"))
	checkJSONSchema(t, "version --json", e.mustEbbfs("version", "--json").stdout, schemaFor(t, all, "`ebbfs version --json`"))
}
