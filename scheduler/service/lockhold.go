package service

import (
	"sync"
	"sync/atomic"
	"time"
)

// timedMutex is the model's lock (cluster.mu), which keeps the longest
// single hold since it was last asked (longest): the most the HTTP API,
// the page, the event stream and the pass's own pins waited for it at
// once, whoever held it. A pass reports it (gpushare_lock_hold_longest_seconds):
// the read's own holds (gpushare_pass_lock_seconds) are not all of it.
type timedMutex struct {
	sync.Mutex
	since time.Time    // when the holder took it; guarded by the lock
	most  atomic.Int64 // nanoseconds
}

func (m *timedMutex) Lock() {
	m.Mutex.Lock()
	m.since = time.Now()
}

func (m *timedMutex) TryLock() bool {
	if !m.Mutex.TryLock() {
		return false
	}
	m.since = time.Now()
	return true
}

func (m *timedMutex) Unlock() {
	held := int64(time.Since(m.since))
	for {
		old := m.most.Load()
		if held <= old || m.most.CompareAndSwap(old, held) {
			break
		}
	}
	m.Mutex.Unlock()
}

// longest returns the longest hold since the last call, and starts over.
func (m *timedMutex) longest() time.Duration { return time.Duration(m.most.Swap(0)) }
