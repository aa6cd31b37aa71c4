package devicefn

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// SharesOf names each share as ShareID.String does, in the order given,
// and each name parses back to its share.
func TestSharesOfNamesEachShare(t *testing.T) {
	uuid := "GPU-7f0d-0001"
	idx := []int{0, 9, 10, 99, 100, 3, 1234, -7, 1000000}
	got := SharesOf(uuid, idx)
	must.Len(t, len(idx), got)
	for i, k := range idx {
		must.Eq(t, ShareID{UUID: uuid, Index: k}.String(), got[i])
		if k < 0 {
			continue // named as String names it; not a share ID
		}
		id, err := ParseShareID(got[i])
		must.NoError(t, err)
		must.Eq(t, ShareID{UUID: uuid, Index: k}, id)
	}
	must.Nil(t, SharesOf(uuid, nil))
}

// BenchmarkSharesOf names 25 shares with SharesOf and, as the baseline
// in the same run, one ShareID.String each (x-faster).
func BenchmarkSharesOf(b *testing.B) {
	idx := make([]int, 25)
	for i := range idx {
		idx[i] = 50 + i
	}
	uuid := "GPU-7f0d8a2c-55b1-4e0b-9c3e-0123456789ab"
	start := time.Now()
	for range b.N {
		out := make([]string, len(idx))
		for i, k := range idx {
			out[i] = ShareID{UUID: uuid, Index: k}.String()
		}
	}
	each := time.Since(start)
	b.ResetTimer()
	for range b.N {
		_ = SharesOf(uuid, idx)
	}
	b.StopTimer()
	b.ReportMetric(float64(each)/float64(max(b.Elapsed(), 1)), "x-faster")
}
