package bytesize

import (
	"errors"
	"testing"

	"github.com/shoenig/test/must"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]uint64{
		"4GiB": 4 << 30, "8 MiB": 8 << 20, "64kib": 64 << 10, "2TiB": 2 << 40,
		"1GB": 1e9, "1048576": 1 << 20, "100B": 100, "1.5GiB": 3 << 29,
	} {
		got, err := Parse(in)
		must.NoError(t, err, must.Sprint(in))
		must.Eq(t, want, got, must.Sprint(in))
	}
	for in, msg := range map[string]string{
		"4G": `"4G" is not a size: write a number and a unit`, "GiB": "is not a size", "": "is not a size",
		"lots": "is not a size", "NaNGiB": "is not a size", "1e30GiB": "too large",
	} {
		_, err := Parse(in)
		must.ErrorContains(t, err, msg, must.Sprint(in))
	}
	for _, in := range []string{"0", "-1GiB", "0.5B"} {
		_, err := Parse(in)
		must.True(t, errors.Is(err, ErrTooSmall), must.Sprint(in))
	}
}

func TestString(t *testing.T) {
	for n, want := range map[uint64]string{2 << 30: "2.0GiB", 1536 << 20: "1.5GiB", 512: "512B", 3 << 20: "3.0MiB", 5 << 40: "5.0TiB"} {
		must.Eq(t, want, String(n))
	}
}
