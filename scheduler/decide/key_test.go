package decide

import (
	"testing"

	"github.com/shoenig/test/must"
)

// A key's string names one group: '/' and '%' in a part are escaped, so
// job "a/b" group "c" and job "a" group "b/c" differ, plain names read as
// they are, and ParseKey reads every key back.
func TestKeyStringNamesOneGroup(t *testing.T) {
	cases := []struct {
		key          Key
		want, legacy string
	}{
		{Key{"default", "train", "g"}, "default/train/g", "default/train/g"},
		{Key{"default", "a/b", "c"}, "default/a%2Fb/c", "default/a/b/c"},
		{Key{"default", "a", "b/c"}, "default/a/b%2Fc", "default/a/b/c"},
		{Key{"default", "batch/periodic-1700000000", "g"}, "default/batch%2Fperiodic-1700000000/g", "default/batch/periodic-1700000000/g"},
		{Key{"default", "100%", "g"}, "default/100%25/g", "default/100%/g"},
		{Key{"default", "a%2Fb", "c"}, "default/a%252Fb/c", "default/a%2Fb/c"},
	}
	seen := map[string]Key{}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			must.Eq(t, c.want, c.key.String())
			must.Eq(t, c.legacy, c.key.Legacy())
			back, ok := ParseKey(c.key.String())
			must.True(t, ok)
			must.Eq(t, c.key, back)
			other, dup := seen[c.want]
			must.False(t, dup, must.Sprintf("%v and %v", other, c.key))
			seen[c.want] = c.key
		})
	}
	for _, bad := range []string{"", "default/a", "default/a/b/c"} {
		_, ok := ParseKey(bad)
		must.False(t, ok, must.Sprint(bad))
	}
}
