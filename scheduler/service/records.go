package service

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Nomad refuses a Variable whose items (keys plus values) exceed 64 KiB.
// Each kind of record is a set of items split by their size into as many
// Variables (shards) as it needs, each at most shardBudget:
//
//	<kind>, <kind>-01, <kind>-02, ...   (reasons: reasons-00, reasons-01, ...)
//
// The first shard says how many there are in its item shardsItem when
// there are more than one, so a kind that fits one Variable is written as
// it was before it was sharded and old records read as they are. Shards a
// kind no longer needs are deleted (after the others are written: a
// reader sees every item in one shard or another, or a missing shard as
// empty). An item larger than a shard alone is not kept (its record is
// lost, not every other's).
const (
	shardBudget = 48 << 10
	shardsItem  = "_shards"
	// maxShards bounds the Variables of one kind (12 MiB of records: the
	// reasons of 10000 groups with 512-character job IDs).
	maxShards = 256
	// legacyReasonShards is how many reasons-NN variables the records had
	// before they were split by size (by a hash of the group).
	legacyReasonShards = 16
)

// kind is one kind of record: where its shards live.
type kind struct {
	name string
	// numbered kinds (the reasons) number their first shard too.
	numbered bool
}

var (
	reasonsKind       = kind{name: "reasons", numbered: true}
	learnedKind       = kind{name: "learned"}
	runsKind          = kind{name: "runtimes"}
	preemptedKind     = kind{name: "preempted"}
	introspectionKind = kind{name: "introspection"}
	submittedKind     = kind{name: "submitted"}
	chargesKind       = kind{name: "charges"}
)

// path is the Variable of shard i.
func (k kind) path(i int) string {
	if i == 0 && !k.numbered {
		return statePrefix + k.name
	}
	return fmt.Sprintf("%s%s-%02d", statePrefix, k.name, i)
}

// owns reports whether a Variable is a shard of k.
func (k kind) owns(path string) bool {
	if path == k.path(0) {
		return true
	}
	n, ok := strings.CutPrefix(path, statePrefix+k.name+"-")
	i, err := strconv.Atoi(n)
	return ok && err == nil && i >= 0 && i < maxShards && k.path(i) == path
}

// itemSize is what an item counts towards a Variable's size in Nomad.
func itemSize(k, v string) int { return len(k) + len(v) }

// shardItems splits items into shards of at most shardBudget, in the
// order of their keys (the split is the same for the same items). It
// returns the keys of the items it could not keep: larger than a shard
// alone, or past maxShards.
func shardItems(items map[string]string) (shards []map[string]string, dropped []string) {
	// room for shardsItem in every shard
	budget := shardBudget - itemSize(shardsItem, strconv.Itoa(maxShards))
	cur, size := map[string]string{}, 0
	for _, k := range slices.Sorted(maps.Keys(items)) {
		n := itemSize(k, items[k])
		if n > budget {
			dropped = append(dropped, k)
			continue
		}
		if size+n > budget {
			shards = append(shards, cur)
			cur, size = map[string]string{}, 0
		}
		if len(shards) == maxShards {
			dropped = append(dropped, k)
			continue
		}
		cur[k] = items[k]
		size += n
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	if len(shards) > 1 {
		shards[0][shardsItem] = strconv.Itoa(len(shards))
	}
	return shards, dropped
}

// varWrite is one Variable to write (no items: delete it).
type varWrite struct {
	path  string
	items map[string]string
}

// plan lists the writes that bring kind k's Variables from what was last
// written or read (saved: path -> hash of its items) to items: changed
// shards but the first, then the shards no longer needed, then the first
// (which says how many there are). The caller holds s.mu.
func (s *records) plan(k kind, items map[string]string) []varWrite {
	shards, dropped := shardItems(items)
	if len(dropped) > 0 {
		s.log.Warn("records too large for Nomad Variables are not saved", "kind", k.name, "items", len(dropped), "first", dropped[0])
	}
	var out []varWrite
	for i := 1; i < len(shards); i++ {
		if s.saved[k.path(i)] != hashItems(shards[i]) {
			out = append(out, varWrite{k.path(i), shards[i]})
		}
	}
	empty := hashItems(nil)
	for _, path := range slices.Sorted(maps.Keys(s.saved)) {
		if k.owns(path) && path != k.path(0) && !slices.Contains(shardPaths(k, len(shards)), path) && s.saved[path] != empty {
			out = append(out, varWrite{path, map[string]string{}})
		}
	}
	if s.saved[k.path(0)] != hashItems(shards[0]) {
		out = append(out, varWrite{k.path(0), shards[0]})
	}
	return out
}

func shardPaths(k kind, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = k.path(i)
	}
	return out
}

// readKind reads every shard of kind k into one set of items; seen gets
// the hash of each Variable read. Reasons written before they were split
// by size are read from their 16 variables.
func (s *records) readKind(ctx context.Context, k kind, seen map[string]string) (map[string]string, error) {
	read := func(path string) (map[string]string, error) {
		rctx, cancel := s.request(ctx)
		defer cancel()
		items, err := s.vars.ReadVar(rctx, path)
		if err != nil {
			return nil, fmt.Errorf("read the scheduler's records at %s: %w", path, err)
		}
		seen[path] = hashItems(items)
		return items, nil
	}
	first, err := read(k.path(0))
	if err != nil {
		return nil, err
	}
	out := maps.Clone(first)
	if out == nil {
		out = map[string]string{}
	}
	n := 1
	if v, ok := first[shardsItem]; ok {
		n, _ = strconv.Atoi(v)
		n = min(max(n, 1), maxShards)
		delete(out, shardsItem)
	} else if k == reasonsKind {
		n = legacyReasonShards
	}
	for i := 1; i < n; i++ {
		items, err := read(k.path(i))
		if err != nil {
			return nil, err
		}
		maps.Copy(out, items)
	}
	return out, nil
}

// writeVars writes what plan listed for one kind, in order, while this
// replica may write. A write that fails stops the kind's others (its
// first shard, which says how many there are, is written last, once the
// others are); they are tried again at the next save. The caller does not
// hold s.mu.
func (s *records) writeVars(ctx context.Context, todo []varWrite) {
	for _, w := range todo {
		if err := s.lease.mayWrite(); err != nil {
			return
		}
		rctx, cancel := s.request(ctx)
		err := s.vars.WriteVar(rctx, w.path, w.items)
		cancel()
		if err != nil {
			s.log.Warn("cannot save the scheduler's records in a Nomad Variable; will retry", "path", w.path, "error", err)
			return
		}
		s.mu.Lock()
		s.saved[w.path] = hashItems(w.items)
		s.mu.Unlock()
	}
}
