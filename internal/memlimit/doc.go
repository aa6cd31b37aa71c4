// Package memlimit chooses the soft memory limit a long-running gpushare
// process gives the Go runtime (runtime/debug.SetMemoryLimit): the one
// its configuration sets, else GOMEMLIMIT, else 90% of the memory limit
// of the cgroup it runs in (a Nomad task's memory, a container's). Under
// the limit the garbage collector runs more often instead of letting the
// heap double past what is live, so the process stays within the memory
// it was given rather than being killed for it.
package memlimit
