package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// unquotedValue is a line whose value starts with a digit and goes on
// with something TOML does not read as a number: a size or duration
// written without quotes (max_size = 64MiB, flush_interval = 1s).
var unquotedValue = regexp.MustCompile(`^\s*([A-Za-z0-9_]+)\s*=\s*([0-9][0-9.]*\s*[A-Za-z][A-Za-z]*)\s*(#.*)?$`)

// hintParseError adds to a TOML syntax error what to do when the line is a
// size or duration written without quotes.
func hintParseError(data []byte, err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	lines := strings.Split(string(data), "\n")
	n := pe.Position.Line
	if n < 1 || n > len(lines) {
		return err
	}
	m := unquotedValue.FindStringSubmatch(lines[n-1])
	if m == nil {
		return err
	}
	val := strings.TrimSpace(m[2])
	return fmt.Errorf("line %d: %s = %s: sizes and durations are strings; write them in quotes: %s = %q (%w)", n, m[1], val, m[1], val, err)
}

// knownKeys lists every "section.key" of the configuration file.
func knownKeys() []string {
	var keys []string
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		sec := ct.Field(i)
		name := tomlName(sec)
		if name == "" || sec.Type.Kind() != reflect.Struct {
			continue
		}
		for j := range sec.Type.NumField() {
			if k := tomlName(sec.Type.Field(j)); k != "" {
				keys = append(keys, name+"."+k)
			}
		}
	}
	return keys
}

func tomlName(f reflect.StructField) string {
	n, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if n == "-" {
		return ""
	}
	return n
}

// suggestKey returns the known key an unknown one most likely meant, or
// "": the same key in another section, or one at most two edits away.
func suggestKey(unknown string) string {
	sec, key, _ := strings.Cut(unknown, ".")
	best, bestD := "", 3
	for _, k := range knownKeys() {
		ks, kk, _ := strings.Cut(k, ".")
		if kk == key && ks != sec && key != "" {
			return k
		}
		if d := editDistance(unknown, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// unknownKeysError names the unknown keys, each with a suggestion when
// there is one.
func unknownKeysError(names []string) error {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%q", n)
		if s := suggestKey(n); s != "" {
			parts[i] += fmt.Sprintf(" (did you mean %q?)", s)
		}
	}
	if len(parts) == 1 {
		return fmt.Errorf("unknown key %s", parts[0])
	}
	return fmt.Errorf("unknown keys %s", strings.Join(parts, ", "))
}
