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

// Issue 44, 10: an allocation another process imported
// (cuMemImportFromShareableHandle: PyTorch's CUDA IPC, vLLM's workers,
// NCCL's cuMem buffers) stays on the device after its creator released and
// unmapped it, and the creator's charge went: it then allocated 3 GiB more,
// 6 GiB on the device under a 4 GiB cap. The importer is charged from its
// first mapping until its own release and unmap. (The fake imports this
// process's own export, standing for another process's: the library
// cannot tell them apart.)
func TestImportedAllocationCharged(t *testing.T) {
	for _, mode := range []string{"dlsym", "procaddr"} {
		t.Run(mode, func(t *testing.T) {
			b, r := vmmprog(t)
			r.mode = mode
			got := r.output(t, b,
				// the exporter: 0 handle, 1 range, 2 fd
				"createx:"+g(3), "reserve:"+g(3), "map:1:0", "export:0",
				// the importer: 3 handle, 4 range
				"import:2", "reserve:"+g(3), "map:4:3",
				// the exporter lets go; the importer holds it
				"unmap:1:"+g(3), "release:0", "fake", "create:"+g(3),
				// the importer lets go: the device gets it back
				"release:3", "unmap:4:"+g(3), "fake", "create:"+g(3), "fake", "peak")
			check(t, got, "createx 0", "reserve 0", "map 0", "export 0",
				"import 0", "reserve 0", "map 0",
				"unmap 0", "release 0", "fake 0 "+g(3),
				"create 2", // the import holds 3 of the 4 GiB (before: granted, 6 GiB)
				"release 0", "unmap 0", "fake 0 0", "create 0", "fake 0 "+g(3),
				"peak 0 "+g(3))
		})
	}
}

// Issue 44, 9: graph memory was checked node by node when added, a launch
// was never refused, and the reserve was charged after it for the current
// device only. Two 3 GiB nodes (added, or cuMemAllocAsync captured)
// under a 4 GiB cap gave 6 GiB at the launch; a relaunch after the
// program trimmed the graph pool (and used the room) 6 GiB; a switch to
// another device dropped the first one's graph charge, 6 GiB. Now a graph's total is checked at instantiation,
// a launch is charged ahead what it may map (refused when it cannot be),
// and each device's reserve is charged apart.
func TestGraphMemoryTotalsAndLaunchesWithinCap(t *testing.T) {
	b, r := vmmprog(t)
	got := r.output(t, b, "graph", "graphnode:0:"+g(3), "graphnode:0:"+g(3),
		"replay:0", "fake")
	check(t, got, "graph 0", "graphnode 0", "graphnode 0",
		"replay 2", // 6 GiB in one graph cannot fit (before: 6 GiB mapped)
		"fake 0 0")

	// the same with cuMemAllocAsync captured into a graph (memory nodes
	// too): stream 0, its graph 3; stream 4, its graph 6
	got = r.output(t, b, "stream", "capture:0", "asyncon:0:"+g(3), "asyncon:0:"+g(3),
		"endcap:0", "replay:3", "fake",
		"stream", "capture:4", "asyncon:4:"+g(3), "endcap:4", "replay:6", "fake")
	check(t, got, "stream 0", "capture 0", "asyncon 0", "asyncon 0",
		"endcap 0", "replay 2", "fake 0 0", // before: 6 GiB
		"stream 0", "capture 0", "asyncon 0", "endcap 0", "replay 0", "fake 0 "+g(3))

	got = r.output(t, b, "graph", "graphnode:0:"+g(3), "inst:0", "launch:1", "fake",
		"gtrim", "alloc:"+g(3), "launch:1", "fake", "peak")
	check(t, got, "graph 0", "graphnode 0", "inst 0", "launch 0", "fake 0 "+g(3),
		"gtrim 0", "alloc 0", // the program's trim gave the graph's 3 GiB back
		"launch 2", // mapping them again cannot fit (before: 6 GiB)
		"fake 0 "+g(3), "peak 0 "+g(3))

	r.env = append(r.env, "FAKECUDA_DEVICES=2")
	got = r.output(t, b, "graph", "graphnode:0:"+g(3), "replay:0",
		"ctx:1", "alloc:"+g(1), "info", "alloc:"+g(2), "fake", "peak")
	check(t, got, "graph 0", "graphnode 0", "replay 0",
		"ctx 0", "alloc 0",
		"info 0 0 "+g(4), // device 0's graph reserve still charged (before: 3 GiB free)
		"alloc 0",        // after a trim of device 0's graph pool
		"fake 0 "+g(3), "peak 0 "+g(4))
}
