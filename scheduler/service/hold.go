package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/feasible"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// Staged placement: several whole-GPU allocations of one group on one
// node. A group's pin is one `${device.ids}` constraint for all its
// allocations, and Nomad's device allocator takes a request's shares from
// the allowed set in any order: with the shares of two GPUs free on one
// node, each of two allocations could get half of both, which Reserve
// refuses. So before such a pin is registered, the scheduler registers a
// hold: a tiny batch job on that node holding the shares of all but one
// of the group's allocations there. Nomad can then give the first
// allocation only the GPUs not held. Once the group's allocations hold
// every pinned share on the node that no hold holds, one hold is let go
// (stopped), and Nomad's blocked evaluation places the next allocation on
// the only GPUs free to it. Holds live in Nomad (their meta names the
// group and the pin), so a scheduler that restarts finds and finishes
// them; one nobody lets go ends by itself after holdLife.

// HoldPrefix starts the ID of every hold job.
const HoldPrefix = "gpushare-hold-"

const (
	metaHoldFor    = "gpushare.hold_for"    // the group's key
	metaHoldPin    = "gpushare.hold_pin"    // pinDigest of the pin it stages
	metaHoldNode   = "gpushare.hold_node"   // the node
	metaHoldShares = "gpushare.hold_shares" // how many shares it holds
	metaHoldSig    = "gpushare.hold_signature"
	// metaHoldPlacement is the gpushare.placement the pin it stages will
	// carry (its sha256 is metaHoldPin, which the signature covers): a
	// scheduler that restarts while the group waits for its holds pins
	// it as decided (hold_keep.go)
	metaHoldPlacement = "gpushare.hold_placement"
	// holdLife is how long a hold's task runs if nobody stops it.
	holdLife = time.Hour
	// holdPlaced is how long Nomad has to place the holds of a pin (on
	// the service's clock, over passes: no pass waits for it) before the
	// group is decided again without staging on their nodes.
	holdPlaced = 30 * time.Second
	// holdCPU, holdMemoryMB and holdDiskMB are what a hold's task asks
	// for; the placement counts the first two (placement.Request.HoldRes).
	holdCPU, holdMemoryMB, holdDiskMB = 20, 16, 10
)

// isHold reports whether a job ID is a hold's.
func isHold(id string) bool { return strings.HasPrefix(id, HoldPrefix) }

// holdNomad is what holds need of Nomad beyond nomadActions.
type holdNomad interface {
	// RegisterHold registers a hold job.
	RegisterHold(ctx context.Context, job *api.Job) error
	// JobAllocs lists a job's allocations.
	JobAllocs(ctx context.Context, namespace, id string) ([]*api.AllocationListStub, error)
	// StopJob stops a job (registers it again with Stop set: the
	// scheduler's policy has register-job, not deregister; and a purge
	// while a plan for it is in flight crashes Nomad 1.11's servers).
	StopJob(ctx context.Context, namespace, id string) error
}

// holdBook is the hold jobs Nomad runs, by namespace/ID, as the watcher
// reads them (never in the model: the shares a hold holds are its
// group's). Guarded by cluster.mu.
type holdBook map[string]*api.Job

// put records a hold job, or forgets one that is stopped.
func (b holdBook) put(j *api.Job) {
	k := model.JobKey(nsOf(j), *j.ID)
	if j.Stop != nil && *j.Stop || j.Status != nil && *j.Status == "dead" {
		delete(b, k)
		return
	}
	b[k] = j
}

// holdSpec is one hold to register: the shares of the allocations of a
// group staged after the first on a node.
type holdSpec struct {
	node   string
	shares []string
}

// stagesOf lists the holds a pin needs: on each node, the pinned
// allocations whose shares no live allocation of the group holds yet are
// grouped by their GPUs; where more than one set of GPUs is to be given,
// all but the first are held. live are the shares the group's live
// allocations hold (Nomad gives those back in place).
func stagesOf(placements []placement.Placement, live map[string]bool) []holdSpec {
	type set struct {
		gpus   string
		shares []string
	}
	byNode := map[string][]set{}
	for _, p := range placements {
		if len(p.Shares) == 0 || slices.ContainsFunc(p.Shares, func(s string) bool { return live[s] }) {
			continue
		}
		gpus := strings.Join(slices.Sorted(slices.Values(p.GPUs)), ",")
		sets := byNode[p.Node]
		if i := slices.IndexFunc(sets, func(s set) bool { return s.gpus == gpus }); i >= 0 {
			sets[i].shares = append(sets[i].shares, p.Shares...)
			continue
		}
		byNode[p.Node] = append(sets, set{gpus: gpus, shares: slices.Clone(p.Shares)})
	}
	var out []holdSpec
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		for _, s := range byNode[node][min(1, len(byNode[node])):] {
			out = append(out, holdSpec{node: node, shares: s.shares})
		}
	}
	return out
}

// pinDigest identifies a group's pin (its placement meta) in its holds.
func pinDigest(job *api.Job, group string) string {
	tg := pin.Group(job, group)
	placement, _ := pin.Carried(tg)
	if placement == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(placement))
	return hex.EncodeToString(sum[:8])
}

// holdDriver is the driver a hold's task uses on a node ("" when the node
// has neither raw_exec nor exec healthy: nothing is staged there).
func holdDriver(n *api.Node) string {
	if n == nil {
		return ""
	}
	for _, d := range []string{"raw_exec", "exec"} {
		if feasible.HasDriver(n, d) { // as Nomad checks the hold's task
			return d
		}
	}
	return ""
}

// holdJob is the hold of spec for group key's pin (digest), the i-th of
// the pin.
func holdJob(key decide.Key, digest string, i int, spec holdSpec, driver string, priority int) *api.Job {
	sum := sha256.Sum256([]byte(key.String()))
	id := fmt.Sprintf("%s%s-%s-%d", HoldPrefix, hex.EncodeToString(sum[:5]), digest[:min(8, len(digest))], i)
	task := api.NewTask("hold", driver)
	task.Config = map[string]any{"command": "sleep", "args": []string{fmt.Sprint(int(holdLife.Seconds()))}}
	task.Resources = &api.Resources{CPU: new(holdCPU), MemoryMB: new(holdMemoryMB), Devices: []*api.RequestedDevice{{
		Name: "nvidia/gpushare", Count: new(uint64(len(spec.shares))),
		Constraints: []*api.Constraint{{LTarget: pin.DeviceAttribute, Operand: pin.OpSetContains, RTarget: strings.Join(spec.shares, ",")}},
	}}}
	task.KillTimeout = new(time.Second)
	task.LogConfig = &api.LogConfig{MaxFiles: new(1), MaxFileSizeMB: new(1)} // within its 10 MB disk
	tg := api.NewTaskGroup("hold", 1)
	tg.AddTask(task)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: new(0), Mode: new(api.RestartPolicyModeFail)}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: new(0), Unlimited: new(false)}
	tg.EphemeralDisk = &api.EphemeralDisk{SizeMB: new(holdDiskMB)}
	job := api.NewBatchJob(id, id, "global", priority)
	job.Namespace = new(key.Namespace)
	job.Region = nil
	job.Datacenters = []string{"*"}
	job.NodePool = new("all")
	job.Constrain(api.NewConstraint("${node.unique.id}", "=", spec.node))
	job.AddTaskGroup(tg)
	job.Meta = map[string]string{metaHoldFor: key.String(), metaHoldPin: digest, metaHoldNode: spec.node, metaHoldShares: fmt.Sprint(len(spec.shares))}
	return job
}

// holdPayload is what a hold's signature signs: its ID, node, pin and
// shares. Only holds that verify are ever stopped: a job of the user's
// that takes the prefix is not the scheduler's to stop.
func holdPayload(j *api.Job) string {
	return "hold\x00" + *j.ID + "\x00" + j.Meta[metaHoldNode] + "\x00" + j.Meta[metaHoldPin] + "\x00" + strings.Join(heldShares(j), ",")
}

// canStage reports whether several whole-GPU allocations of a group may
// be staged on a node. The caller holds the model's lock.
func (st *stager) canStage(nodeID string) bool {
	return st.nomad != nil && holdDriver(st.c.state.Nodes[nodeID]) != ""
}

// unstage lets go the holds of a pin that was not registered.
func (st *stager) unstage(ctx context.Context, pinned *api.Job, ids []string) {
	h := st.nomad
	for _, id := range ids {
		rctx, cancel := st.request(context.WithoutCancel(ctx))
		err := h.StopJob(rctx, nsOf(pinned), id)
		cancel()
		if err != nil && !isNotFound(err) {
			st.log.Warn("cannot let go a hold of a pin not registered; it ends by itself", "hold", id, "after", holdLife, "error", err)
			continue
		}
		st.c.mu.Lock()
		delete(st.c.holds, model.JobKey(nsOf(pinned), id)) // not read back as a group's staging (adoptHolds)
		st.c.mu.Unlock()
	}
}

func ptrInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// replacedTogether reports whether a destructive change of the group
// makes Nomad replace several of its running allocations at once (a batch
// job, or an update block whose max_parallel is 0, all at once, or 2 and
// more) while two of them share a node on GPUs of their own (they were
// staged). Replacements pinned to the shares they free could each get
// shares of both GPUs, which Reserve refuses; so the new version is placed
// beside them and staged, as canaries are, and Nomad stops the old ones
// as it places each.
func replacedTogether(job *api.Job, tg *api.TaskGroup, live []*api.Allocation) bool {
	if maxParallel(job, tg) == 1 {
		return false
	}
	gpus := map[string]string{} // node -> the GPUs of one allocation there
	for _, a := range live {
		set := map[string]bool{}
		for _, sh := range model.Shares(a) {
			if id, err := devicefn.ParseShareID(sh); err == nil {
				set[id.UUID] = true
			}
		}
		if len(set) == 0 {
			continue
		}
		key := strings.Join(slices.Sorted(maps.Keys(set)), ",")
		if prev, ok := gpus[a.NodeID]; ok && prev != key {
			return true
		}
		gpus[a.NodeID] = key
	}
	return false
}

// maxParallel is how many allocations of the group Nomad replaces at once
// on a destructive update: the group's update block, else the job's (0:
// all at once, as for a batch job).
func maxParallel(job *api.Job, tg *api.TaskGroup) int {
	if job.Type != nil && *job.Type != api.JobTypeService {
		return 0
	}
	for _, u := range []*api.UpdateStrategy{tg.Update, job.Update} {
		if u != nil && u.MaxParallel != nil {
			return *u.MaxParallel
		}
	}
	return 1 // Nomad's default update block
}
