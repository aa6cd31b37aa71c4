package pin

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/nomad/api"
)

// Several whole GPUs in one allocation on nodes whose plugin offers each
// GPU as a device group of its own (device_groups = "gpu"): Nomad takes
// one request's instances from one device group, so a group asking for k
// GPUs is asked there as k device blocks of one GPU's shares each, in
// its GPU task, each a copy of the one the user wrote (Record.Blocks).
// Nomad places block after block, each on a GPU of its own; the plugin's
// interposer puts the GPUs of a task back together (devicefn.AttrMultiGPU).
// Written at the group's first such pin, never changed while it keeps k
// GPUs per allocation: a re-pin that moves only its nodes stays in place.
//
// Everything that reads a group's request reads k copies as the one block
// they were split from (requestBlocks): the same request, Digest and Spec
// as the file the user registers again, which the pin is written back
// into byte for byte. A user who writes the copies by hand writes the
// same request.

// gpuBlocks returns the gpushare device blocks of the group's GPU task.
func gpuBlocks(tg *api.TaskGroup) []*api.RequestedDevice { return taskBlocks(gpuTask(tg)) }

// taskBlocks returns the gpushare device blocks of t (nil: none).
func taskBlocks(t *api.Task) []*api.RequestedDevice {
	if t == nil || t.Resources == nil {
		return nil
	}
	var out []*api.RequestedDevice
	for _, d := range t.Resources.Devices {
		if isOurs(d.Name) {
			out = append(out, d)
		}
	}
	return out
}

// splitCopies reports how many copies of one block devs are: len(devs)
// when there are two or more, every one the same (name, count,
// constraints, affinities); 1 otherwise.
func splitCopies(devs []*api.RequestedDevice) int {
	if len(devs) < 2 {
		return 1
	}
	first, err := json.Marshal(devs[0])
	if err != nil {
		return 1
	}
	for _, d := range devs[1:] {
		b, err := json.Marshal(d)
		if err != nil || string(b) != string(first) {
			return 1
		}
	}
	return len(devs)
}

func blockCount(d *api.RequestedDevice) uint64 {
	if d.Count == nil {
		return 1
	}
	return *d.Count
}

// requestBlocks is what a task's gpushare blocks ask for as one request:
// the block (the first) and the shares of one allocation, summed over the
// copies of a split. ok is false when the task holds several blocks that
// are not copies of one.
func requestBlocks(t *api.Task) (first *api.RequestedDevice, shares uint64, copies int, ok bool) {
	devs := taskBlocks(t)
	if len(devs) == 0 {
		return nil, 0, 0, true
	}
	k := splitCopies(devs)
	if len(devs) > 1 && k == 1 {
		return devs[0], 0, len(devs), false
	}
	return devs[0], blockCount(devs[0]) * uint64(k), k, true
}

// joinBlocks turns the copies of a split in t back into the one block
// they were split from, at the first copy's place.
func joinBlocks(t *api.Task) {
	first, shares, copies, ok := requestBlocks(t)
	if !ok || copies < 2 {
		return
	}
	first.Count = ref(shares)
	seen := false
	t.Resources.Devices = slices.DeleteFunc(t.Resources.Devices, func(d *api.RequestedDevice) bool {
		if !isOurs(d.Name) {
			return false
		}
		drop := seen
		seen = true
		return drop
	})
}

// setBlocks makes the group's gpushare request k blocks (k < 2: one) of
// an equal part of its shares each, at the place of the first: the same
// k blocks whatever it held before, so writing the same pin again changes
// nothing.
func setBlocks(tg *api.TaskGroup, k int) error {
	t := gpuTask(tg)
	if t == nil {
		return nil
	}
	joinBlocks(t)
	if k < 2 {
		return nil
	}
	at := slices.IndexFunc(t.Resources.Devices, func(d *api.RequestedDevice) bool { return isOurs(d.Name) })
	if at < 0 {
		return nil
	}
	dev := t.Resources.Devices[at]
	total := blockCount(dev)
	if total%uint64(k) != 0 {
		return fmt.Errorf("%d shares of %q do not split into %d device blocks of one GPU each", total, dev.Name, k)
	}
	dev.Count = ref(total / uint64(k))
	copies := make([]*api.RequestedDevice, 0, k-1)
	for range k - 1 {
		copies = append(copies, cloneDevice(dev))
	}
	t.Resources.Devices = slices.Insert(t.Resources.Devices, at+1, copies...)
	return nil
}

func cloneDevice(d *api.RequestedDevice) *api.RequestedDevice { return deepCopy(d) }

func cloneTask(t *api.Task) *api.Task { return deepCopy(t) }

// deepCopy copies an API value through its JSON, as the API sends it.
func deepCopy[T any](v *T) *T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the API's types always encode
	}
	var c T
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return &c
}

// blocksOf is how many device blocks a node pin of d writes: the GPUs of
// one allocation when it holds more than one (each a device group of its
// own on such nodes), else 0 (one block).
func blocksOf(gpusPerAlloc int) int {
	if gpusPerAlloc < 2 {
		return 0
	}
	return gpusPerAlloc
}
