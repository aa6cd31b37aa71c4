package interposer

import (
	"fmt"
	"testing"
)

// unifiedLimits is a 10 MiB cap for a task of the class, with unified
// memory on or off; on, an opportunistic task may hold 6 MiB more as
// managed memory.
func unifiedLimits(class string, on bool) string {
	l := fmt.Sprintf("memory_bytes=%d\ncompute_pct=50\nclass=%s\n", 10*mib, class)
	if on {
		l += fmt.Sprintf("unified_memory=1\nunified_extra_bytes=%d\n", 6*mib)
	}
	return l
}

// With unified_memory=1 an opportunistic task's cuMemAlloc_v2 and
// cuMemAllocPitch_v2 become managed memory (the fake driver says which of
// its allocations are managed). Managed memory may go beyond the 10 MiB cap,
// up to cap + unified_extra_bytes (16 MiB), as the driver can evict it to
// host memory; memory that cannot be evicted (a stream-ordered allocation)
// is refused while the reservation is over its cap, and allowed again once
// it is back under. Memory info still reports the cap. Frees of converted
// allocations go through cuMemFree_v2 and return their charge. For each way
// a program finds the driver's functions.
func TestUnifiedMemoryOpportunistic(t *testing.T) {
	b := build(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r := run{limits: reservation(t, unifiedLimits("opportunistic", true)), program: b.prog(m.prog), mode: m.name}
			got := r.output(t, b,
				"alloc:6291456", "alloc:6291456", // 12 MiB: over the cap, as managed memory
				"alloc:6291456", // 18 MiB: over cap + extra
				"async:1048576", // not evictable, and the reservation is over its cap
				"umem", "info",
				"free:1", "async:1048576", "pitch:1100:1000", "umem", "info")
			check(t, got,
				"alloc 0", "alloc 0", "alloc 2", "async 2",
				fmt.Sprintf("umem 0 %d 0", 12*mib), // both managed, none advised to the device
				fmt.Sprintf("info 0 0 %d", 10*mib),
				"free 0",  // cuMemFree_v2 of a converted allocation
				"async 0", // 7 MiB: under the cap again
				"pitch 0", // managed too, pitch 1536 (the width rounded up to 512)
				fmt.Sprintf("umem 0 %d 0", 6*mib+1536*1000),
				fmt.Sprintf("info 0 %d %d", 10*mib-7*mib-1536*1000, 10*mib))
		})
	}
}

// What unified memory leaves alone: a production task's device memory stays
// device memory under the cap, and its own managed allocations are advised
// to stay on its device; with the option off nothing changes for either
// class (no conversion, no advice, no room beyond the cap); a normal task is
// not converted.
func TestUnifiedMemoryLeavesOthersAlone(t *testing.T) {
	b := build(t)
	cases := []struct {
		name, limits string
		want         []string
	}{
		{"production", unifiedLimits("production", true),
			[]string{"alloc 0", "alloc 2", "managed 0", fmt.Sprintf("umem 0 %d %d", mib, mib)}},
		{"production-off", unifiedLimits("production", false),
			[]string{"alloc 0", "alloc 2", "managed 0", fmt.Sprintf("umem 0 %d 0", mib)}},
		{"opportunistic-off", unifiedLimits("opportunistic", false),
			[]string{"alloc 0", "alloc 2", "managed 0", fmt.Sprintf("umem 0 %d 0", mib)}},
		{"normal", unifiedLimits("normal", true),
			[]string{"alloc 0", "alloc 2", "managed 0", fmt.Sprintf("umem 0 %d 0", mib)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run{limits: reservation(t, c.limits), program: b.dyn, mode: "dlsym"}
			check(t, r.output(t, b, "alloc:6291456", "alloc:6291456", "managed:1048576", "umem"), c.want...)
		})
	}
}

// An opportunistic task's own managed allocations get the same room beyond
// the cap as converted ones; the room is shared by the reservation's
// processes (one counter): a second process finds it taken.
func TestUnifiedMemoryExtraIsTheReservations(t *testing.T) {
	b := build(t)
	dir := reservation(t, unifiedLimits("opportunistic", true))
	holder := start(t, b, run{limits: dir, mode: "direct"}, "managed:12582912", "wait")
	if l := holder.next(t); l != "managed 0" {
		t.Fatalf("holder: %q", l)
	}
	r := run{limits: dir, mode: "direct"}
	check(t, r.output(t, b, "alloc:6291456", "alloc:4194304", "alloc:1048576"), "alloc 2", "alloc 0", "alloc 2")
}

// A unified_memory value other than 0 or 1 is a malformed limits file: no
// memory (fail closed), as for every other key.
func TestUnifiedMemoryMalformed(t *testing.T) {
	b := build(t)
	for _, l := range []string{"unified_memory=yes\n", "unified_memory=1\nunified_extra_bytes=-1\n"} {
		r := run{limits: reservation(t, l+"class=opportunistic\n"), mode: "direct"}
		check(t, r.output(t, b, "alloc:1048576"), "alloc 2")
	}
}
