package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count written in the config as "256MiB", "10GiB",
// "512KiB", "4096" (bytes) or a bare TOML integer (bytes). Binary (KiB,
// MiB, GiB, TiB) and decimal (KB, MB, GB, TB) suffixes are accepted; a
// suffix is case-insensitive except that "b" is not accepted for bits.
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40}, {"pib", 1 << 50},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"pb", 1e15},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseSize parses a size string such as "256MiB".
func ParseSize(s string) (Size, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty size")
	}
	lower := strings.ToLower(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(lower, u.suffix) {
			mult = u.mult
			lower = strings.TrimSpace(lower[:len(lower)-len(u.suffix)])
			break
		}
	}
	if lower == "" {
		return 0, fmt.Errorf("size %q has no number", orig)
	}
	// Integers are exact; a fraction ("1.5GiB") is allowed and rounded down.
	if n, err := strconv.ParseInt(lower, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("size %q is negative", orig)
		}
		if n > math.MaxInt64/mult {
			return 0, fmt.Errorf("size %q is too large", orig)
		}
		return Size(n * mult), nil
	}
	f, err := strconv.ParseFloat(lower, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || strings.ContainsAny(lower, "xXpP_") {
		return 0, fmt.Errorf("size %q is not a number with an optional unit (KiB, MiB, GiB, TiB, KB, MB, GB, TB)", orig)
	}
	if f < 0 {
		return 0, fmt.Errorf("size %q is negative", orig)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", orig)
	}
	return Size(v), nil
}

// UnmarshalTOML implements toml.Unmarshaler.
func (s *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("size %d is negative", x)
		}
		*s = Size(x)
		return nil
	case string:
		n, err := ParseSize(x)
		if err != nil {
			return err
		}
		*s = n
		return nil
	default:
		return fmt.Errorf("size must be a string like \"256MiB\" or an integer byte count, not %T", v)
	}
}

// MarshalText implements encoding.TextMarshaler.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// String formats the size with the largest binary unit that divides it.
func (s Size) String() string {
	n := int64(s)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// Duration is a time span written as "1s", "500ms", "2m".
type Duration time.Duration

// UnmarshalTOML implements toml.Unmarshaler.
func (d *Duration) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("duration must be a string like \"1s\" or \"500ms\", not %T", v)
	}
	x, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("duration %q: use a number with a unit such as \"1s\" or \"500ms\"", s)
	}
	*d = Duration(x)
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// String formats like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
