package bytesize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrTooSmall is wrapped by Parse's error for a size under one byte
// (zero or negative): callers say what to write instead.
var ErrTooSmall = errors.New("must be at least 1 byte")

var units = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// Parse reads a byte size: "4GiB", "512 MiB", "1GB", "1048576". Units
// are matched without regard to case; a bare number is bytes.
func Parse(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	num, mult := s, 1.0
	for _, u := range units {
		if len(s) > len(u.suffix) && strings.EqualFold(s[len(s)-len(u.suffix):], u.suffix) {
			num, mult = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size: write a number and a unit, such as 4GiB or 512MiB", s)
	}
	b := v * mult
	if b < 1 {
		return 0, fmt.Errorf("%q: %w", s, ErrTooSmall)
	}
	if b >= 1<<63 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return uint64(b), nil
}

// String writes n in the largest binary unit that keeps one decimal:
// 2147483648 is "2.0GiB".
func String(n uint64) string {
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult {
			return fmt.Sprintf("%.1f%s", float64(n)/float64(u.mult), u.suffix)
		}
	}
	return fmt.Sprintf("%dB", n)
}
