package interposer

import "testing"

// Issue 44, 8: threads allocating from one pool at once (XLA/TF's
// cuda_malloc_async, PyTorch's cudaMallocAsync backend) each saw the
// pool's 3 GiB idle reserve and were charged nothing ahead: 8 threads
// asking 3 GiB under a 4 GiB cap got 5 grants, 15 GiB on the device. An
// allocation's charge, call and settle are one step per pool: the first
// takes the idle reserve, the others would grow the pool past the cap.
// The fake's pool allocation takes 2 ms (FAKECUDA_POOL_ALLOC_US) so the
// threads, started at a barrier, overlap in them as on a loaded host.
func TestConcurrentPoolAllocationsWithinCap(t *testing.T) {
	b, r := vmmprog(t)
	r.env = append(r.env, "FAKECUDA_POOL_ALLOC_US=2000")
	got := r.output(t, b,
		"defpool", "threshold:0:"+g(16), "async:"+g(3), "freeasync:1",
		"race:8:"+g(3), "fake", "peak", "info")
	check(t, got, "defpool 0", "threshold 0", "async 0", "freeasync 0",
		"race 0 1",     // the idle reserve, once (before: 5)
		"fake 0 "+g(3), // before: 15 GiB
		"peak 0 "+g(3), // never over the cap
		"info 0 "+g(1)+" "+g(4))
}
