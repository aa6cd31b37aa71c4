package devicefn

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// ShareID names one share of one GPU: "<GPU UUID>:<k>", k = 0..shares_per_gpu-1.
type ShareID struct {
	UUID  string
	Index int
}

// ErrBadShareID is returned for a string that is not a share ID.
var ErrBadShareID = errors.New("invalid share ID")

// String returns the Nomad instance ID of the share.
func (s ShareID) String() string { return s.UUID + ":" + strconv.Itoa(s.Index) }

// SharesOf returns the Nomad instance IDs of shares idx of GPU uuid, in
// that order. They are cut from one string, one allocation for them all
// rather than one each: a decision pass names hundreds of thousands.
func SharesOf(uuid string, idx []int) []string {
	if len(idx) == 0 {
		return nil
	}
	n := 0
	for _, k := range idx {
		n += ShareIDLen(uuid, k)
	}
	buf := make([]byte, 0, n)
	for _, k := range idx {
		buf = append(buf, uuid...)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(k), 10)
	}
	all := unsafe.String(unsafe.SliceData(buf), len(buf)) // buf is never written again
	out := make([]string, len(idx))
	start := 0
	for i, k := range idx {
		end := start + ShareIDLen(uuid, k)
		out[i] = all[start:end]
		start = end
	}
	return out
}

// ShareIDLen is the length of share k's ID on GPU uuid (its String),
// without writing it.
func ShareIDLen(uuid string, k int) int { return len(uuid) + 1 + digits(k) }

// digits is the length of k in base 10, its sign included.
func digits(k int) int {
	n := 1
	if k < 0 {
		n++
		k = -k
	}
	for k >= 10 {
		k /= 10
		n++
	}
	return n
}

// ParseShareID parses "<GPU UUID>:<k>".
func ParseShareID(s string) (ShareID, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return ShareID{}, fmt.Errorf("%w %q: want <GPU UUID>:<share index>", ErrBadShareID, s)
	}
	k, err := strconv.Atoi(s[i+1:])
	if err != nil || k < 0 || s[i+1] == '+' {
		return ShareID{}, fmt.Errorf("%w %q: share index %q is not a non-negative integer", ErrBadShareID, s, s[i+1:])
	}
	if strconv.Itoa(k) != s[i+1:] {
		return ShareID{}, fmt.Errorf("%w %q: share index %q is not in canonical form", ErrBadShareID, s, s[i+1:])
	}
	return ShareID{UUID: s[:i], Index: k}, nil
}

// ShareIDs returns the n share IDs of the GPU with the given UUID.
func ShareIDs(uuid string, n int) []string {
	ids := make([]string, n)
	for k := range n {
		ids[k] = ShareID{UUID: uuid, Index: k}.String()
	}
	return ids
}
