package devicefn

import (
	"testing"

	"github.com/shoenig/test/must"
)

// SharesOf names each share as ShareID.String does, in the order given,
// and each name parses back to its share.
func TestSharesOfNamesEachShare(t *testing.T) {
	uuid := "GPU-7f0d-0001"
	idx := []int{0, 9, 10, 99, 100, 3, 1234}
	got := SharesOf(uuid, idx)
	must.Len(t, len(idx), got)
	for i, k := range idx {
		must.Eq(t, ShareID{UUID: uuid, Index: k}.String(), got[i])
		id, err := ParseShareID(got[i])
		must.NoError(t, err)
		must.Eq(t, ShareID{UUID: uuid, Index: k}, id)
	}
	must.Nil(t, SharesOf(uuid, nil))
}
