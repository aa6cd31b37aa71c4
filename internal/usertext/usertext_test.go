package usertext

import (
	"testing"

	"github.com/shoenig/test/must"
)

// Reasons read by users: job IDs unescaped, allocation and node IDs of 8
// characters as Nomad's CLI shows them, GPU UUIDs whole, no "learned:".
func TestReason(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"waits behind default/nightly%2Fperiodic-1700000000/g (priority 80)",
			"waits behind default/nightly/periodic-1700000000/g (priority 80)"},
		{"preempts allocation 4f1c2d3e-aaaa-bbbb-cccc-0123456789ab of default/batch/g",
			"preempts allocation 4f1c2d3e of default/batch/g"},
		{"25 shares of GPU 0 (GPU-4f1c2d3e-aaaa-bbbb-cccc-0123456789ab) on node 9a8b7c6d-1111-2222-3333-444455556666",
			"25 shares of GPU 0 (GPU-4f1c2d3e-aaaa-bbbb-cccc-0123456789ab) on node 9a8b7c6d"},
		{"MIG-4f1c2d3e-aaaa-bbbb-cccc-0123456789ab stays", "MIG-4f1c2d3e-aaaa-bbbb-cccc-0123456789ab stays"},
		{"pairs learned:default/train%2Fa/g with sm 0.50/bw 0.30; slower than its bound",
			"pairs the profile learned from default/train/a/g with sm 0.50/bw 0.30; slower than its bound"},
		{"a 100%25 load", "a 100% load"},
		{"nothing to change: 50% of GPU 0", "nothing to change: 50% of GPU 0"},
	} {
		must.EqOp(t, tc.want, Reason(tc.in), must.Sprint(tc.in))
	}
}
