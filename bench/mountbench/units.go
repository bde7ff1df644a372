package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Size units.
const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// sizeFlag is a byte count written "1GiB", "512MiB", "4KiB" or a bare
// number of bytes (flag.Value).
type sizeFlag int64

func (s *sizeFlag) String() string { return formatSize(int64(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

// parseSize parses a size with an optional binary suffix (KiB, MiB, GiB;
// K, M, G and KB, MB, GB mean the same).
func parseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{
		{"KiB", KiB}, {"MiB", MiB}, {"GiB", GiB},
		{"KB", KiB}, {"MB", MiB}, {"GB", GiB},
		{"K", KiB}, {"M", MiB}, {"G", GiB},
	} {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			s, mult = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q (want e.g. 1GiB, 512MiB or a number of bytes)", v)
	}
	return n * mult, nil
}

// formatSize prints n in the largest binary unit that divides it.
func formatSize(n int64) string {
	switch {
	case n >= GiB && n%GiB == 0:
		return fmt.Sprintf("%dGiB", n/GiB)
	case n >= MiB && n%MiB == 0:
		return fmt.Sprintf("%dMiB", n/MiB)
	case n >= KiB && n%KiB == 0:
		return fmt.Sprintf("%dKiB", n/KiB)
	}
	return fmt.Sprintf("%dB", n)
}

// mib formats a byte count in MiB with one decimal.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/MiB) }
