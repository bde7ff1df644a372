package main

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
	"unicode"
)

// The one JSON style of every --json output (docs/JSON.md): snake_case
// keys, durations as seconds (a number, the key ending in _seconds),
// sizes in bytes, times as RFC 3339 strings in UTC and absent when
// unknown (zero), never a Go field name. Values are converted by
// reflection so that a field added to a reply type keeps the style
// without a second struct to maintain.

var (
	timeType     = reflect.TypeOf(time.Time{})
	durationType = reflect.TypeOf(time.Duration(0))
	marshalerT   = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	textMarshalT = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
)

// printJSON writes v in the documented style, indented.
func printJSON(w io.Writer, v any) error {
	out, _ := jsonStyle(reflect.ValueOf(v))
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("json: %w", err)
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// jsonStyle converts v to maps, slices and scalars in the documented
// style; omit is true for a value that is left out of its object (a zero
// time, a nil pointer).
func jsonStyle(v reflect.Value) (out any, omit bool) {
	if !v.IsValid() {
		return nil, true
	}
	switch t := v.Type(); {
	case t == timeType:
		tm := v.Interface().(time.Time)
		if tm.IsZero() {
			return nil, true
		}
		return tm.UTC().Format(time.RFC3339Nano), false
	case t == durationType:
		return time.Duration(v.Int()).Seconds(), false
	case t.Kind() != reflect.Struct && t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface &&
		(t.Implements(marshalerT) || t.Implements(textMarshalT)):
		return viaJSON(v.Interface()), false
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, true
		}
		return jsonStyle(v.Elem())
	case reflect.Struct:
		m := map[string]any{}
		structFields(v, m)
		return m, false
	case reflect.Map:
		m := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			if val, omit := jsonStyle(it.Value()); !omit {
				m[fmt.Sprint(it.Key().Interface())] = val
			}
		}
		return m, false
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return viaJSON(v.Interface()), false
		}
		s := make([]any, 0, v.Len())
		for i := 0; i < v.Len(); i++ {
			val, _ := jsonStyle(v.Index(i))
			s = append(s, val)
		}
		return s, false
	}
	return v.Interface(), false
}

// structFields adds v's exported fields to m, embedded structs inlined.
func structFields(v reflect.Value, m map[string]any) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		fv := v.Field(i)
		if f.Anonymous && name == "" && fv.Kind() == reflect.Struct {
			structFields(fv, m) // promoted, as encoding/json does
			continue
		}
		if !f.IsExported() {
			continue
		}
		if (strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")) && fv.IsZero() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		key := snakeCase(name)
		if f.Type == durationType && !strings.HasSuffix(key, "_seconds") {
			key += "_seconds"
		}
		if val, omit := jsonStyle(fv); !omit {
			m[key] = val
		}
	}
}

// viaJSON is v as encoding/json renders it, decoded back to plain values.
func viaJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return string(b)
	}
	return out
}

// snakeCase turns a Go or JSON field name into snake_case:
// "ExpireTime" -> "expire_time", "FSUUID" -> "fsuuid", "BytesUp" ->
// "bytes_up", "fs_uuid" stays.
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			prevLower := i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]))
			nextLower := i > 0 && i+1 < len(r) && unicode.IsUpper(r[i-1]) && unicode.IsLower(r[i+1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// emit prints v as JSON in the documented style when asJSON is set, and
// for people with human otherwise.
func emit(w io.Writer, asJSON bool, v any, human func(io.Writer)) error {
	if asJSON {
		return printJSON(w, v)
	}
	human(w)
	return nil
}
