package model

import (
	"reflect"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
	"github.com/hashicorp/nomad/api"
)

// Request is pin.Request with the learned profile filled in when the
// group declares none, and the run time learned from its family's
// finished runs (Runs) when it declares none.
func (s *State) Request(job *api.Job, group string, profiles *interference.Model) (placement.Request, error) {
	r, err := s.request(job, group, profiles)
	if err == nil && !r.Profile.Known() {
		if p, ok := s.Learned[r.ID]; ok {
			r.Profile = p
			r.Profile.Name = LearnedName(r.ID)
		}
	}
	if err == nil && r.Expected == 0 && len(s.Runs) > 0 {
		if runs := s.Runs[RunsKey(job, group)]; len(runs) > 0 {
			r.Expected, r.LearnedFrom = runs.Expected(), len(runs)
		}
	}
	if err == nil && r.Profile.Name == "" {
		// declared fractions, or none: observations of this group stay its
		// own (interference.Knowledge keys jobs by Profile.Key)
		r.Profile.ID = r.ID
	}
	return r, err
}

// LearnedName names the profile learned for a group (by request ID): one
// name per group, so that what is observed of a pairing is kept per job
// (interference.Knowledge knows jobs by Profile.Key).
func LearnedName(id string) string { return LearnedPrefix + id }

// LearnedPrefix begins the name of every learned profile.
const LearnedPrefix = "learned:"

// State is the cluster as the service last saw it. One goroutine at a
// time writes it; once ForReaders is called, any number may read it
// (Snapshot and TakeTouched count as writes: the reader that calls them
// must be the only one to).
type State struct {
	Nodes  map[string]*api.Node
	Jobs   map[string]*api.Job // by "<namespace>/<job ID>"
	Allocs map[string]*api.Allocation
	// Index is the Nomad raft index the state reflects.
	Index uint64
	// Learned are interference profiles observed from groups that ran
	// alone on their GPU, by group key; used when a group declares none.
	Learned map[string]interference.Profile
	// Runs are the latest finished runs of batch groups, by RunsKey: the
	// run time of a group that declares none is learned from them
	// (runs.go).
	Runs map[string]queue.Runs
	// RunCost, when set, is what sharing its GPU cost an allocation that
	// finished (introspection's charge, a time-sliced one's turns waited),
	// netted from its run (noteRun).
	RunCost func(alloc string) time.Duration
	// Gone are deletions seen in events, by kind and ID, at their index (merge.go).
	Gone deletions
	// ownJobs are the jobs whose model copy the scheduler put itself
	// (PutOwnJob), not yet read back from Nomad.
	ownJobs map[string]bool
	// indexes are Allocs by group and by job, kept in step (index.go).
	indexes allocIndexes
	// changed is what changed since the last Snapshot (changes.go).
	changed changes
	// Rebuild has Snapshot look at every node, allocation and job each
	// time, as it did before the state kept what changed: benchmarks
	// compare the two, tests check they agree.
	Rebuild bool
	// cache is each job version's requests and pin records, parsed once
	// (cache.go).
	cache jobCache
	// live is the placement snapshot kept in step with the state (Snapshot).
	live *live
	// learnedGen counts the changes to what an allocation's group facts
	// are read from besides its job: Learned (through Learn) and the
	// trust in pin records (ForgetParsed).
	learnedGen uint64
	// Trust, when set, decides whether a group's gpushare.placement meta
	// counts: only placements the scheduler wrote do (a user may write the
	// meta by hand).
	Trust func(k decide.Key, placement, signature string) bool
	// Feasible, when set, returns which nodes the current version of a
	// pinned group's job still allows (Nomad's own rules: datacenters,
	// constraints, drivers, ...); nil allows every node. Snapshot holds a
	// pinned group's shares only on those: Nomad places nothing elsewhere.
	Feasible func(job *api.Job, group string) func(node string) bool
	// Managed, when set, says which namespaces the scheduler manages
	// (Manages); Admits, when set, whether a virtual cluster admits the
	// jobs of a namespace (Attribution).
	Managed func(namespace string) bool
	Admits  func(vc, namespace string) bool
	// priors are the last trusted pin of each group seen in an earlier
	// version of its job (prior.go).
	priors priors
	// verdicts are what Nomad said of groups it could not place, from its
	// evaluations (unplaced.go).
	verdicts verdicts
	// versions are the jobs reduced to a version that stored allocations
	// share (slim.go).
	versions versions
}

// forgetJob drops what the state keeps of a job that is gone: its
// groups' earlier pins and what Nomad said of them.
func (s *State) forgetJob(job *api.Job) {
	s.cache.dropObject(job)
	s.priors.forget(job)
	s.verdicts.forget(namespaceOf(job), *job.ID)
}

// New returns an empty state.
func New() *State {
	return &State{Nodes: map[string]*api.Node{}, Jobs: map[string]*api.Job{}, Allocs: map[string]*api.Allocation{}, Learned: map[string]interference.Profile{}, Runs: map[string]queue.Runs{}}
}

// JobKey is the key of a job in State.Jobs.
func JobKey(namespace, id string) string {
	if namespace == "" {
		namespace = "default"
	}
	return namespace + "/" + id
}

func jobKey(j *api.Job) string {
	ns := ""
	if j.Namespace != nil {
		ns = *j.Namespace
	}
	return JobKey(ns, *j.ID)
}

// PutJob records a job (registered or updated).
func (s *State) PutJob(j *api.Job) {
	if j == nil || j.ID == nil {
		return
	}
	delete(s.ownJobs, jobKey(j))
	// events can arrive after a fresher read of the same job: keep the newer
	prev, ok := s.Jobs[jobKey(j)]
	if ok && prev.ModifyIndex != nil && j.ModifyIndex != nil && *j.ModifyIndex < *prev.ModifyIndex {
		return
	}
	if ok && prev != j {
		s.keepPriors(prev, j)
		s.cache.dropObject(prev)
	}
	s.Jobs[jobKey(j)] = j
	s.changed.job(jobKey(j))
}

// DeleteJob forgets a purged job and its allocations: Nomad stops them,
// and publishes no allocation events for a job that no longer exists.
func (s *State) DeleteJob(namespace, id string) {
	if job := s.Jobs[JobKey(namespace, id)]; job != nil {
		s.forgetJob(job)
	}
	delete(s.Jobs, JobKey(namespace, id))
	s.changed.job(JobKey(namespace, id))
	for _, aid := range s.indexes.ofJob(JobKey(namespace, id)) {
		s.dropAlloc(aid)
	}
}

// FromStub turns an allocation from a listing (with ?resources=true) into
// the fields the model reads, so a listing needs no request per allocation.
func FromStub(s *api.AllocationListStub) *api.Allocation {
	version := s.JobVersion
	a := &api.Allocation{
		ID: s.ID, Name: s.Name, Namespace: s.Namespace, NodeID: s.NodeID, NodeName: s.NodeName, JobID: s.JobID,
		TaskGroup: s.TaskGroup, DesiredStatus: s.DesiredStatus, ClientStatus: s.ClientStatus,
		AllocatedResources: s.AllocatedResources, DeploymentStatus: s.DeploymentStatus,
		Job:         &api.Job{Version: &version}, // the version it runs (Current)
		CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex, CreateTime: s.CreateTime, ModifyTime: s.ModifyTime,
	}
	switch s.ClientStatus {
	case api.AllocClientStatusFailed:
		// whether Nomad reschedules it (FailedForGood); a listing does
		// not say how it is marked (its desired transition)
		a.TaskStates, a.RescheduleTracker, a.NextAllocation = s.TaskStates, s.RescheduleTracker, s.NextAllocation
	case api.AllocClientStatusComplete:
		a.TaskStates = s.TaskStates // how long it ran (noteRun)
	}
	return a
}

// HasResources reports whether the state holds the allocation with its
// allocated resources.
func (s *State) HasResources(id string) bool {
	a, ok := s.Allocs[id]
	return ok && a.AllocatedResources != nil
}

// PutAlloc records an allocation.
func (s *State) PutAlloc(a *api.Allocation) {
	if a == nil || a.ID == "" {
		return
	}
	var res *api.AllocatedResources
	if prev, ok := s.Allocs[a.ID]; ok {
		if a.ModifyIndex < prev.ModifyIndex {
			return
		}
		// event payloads may omit or trim resources, and an allocation's
		// devices never change: keep what we read (slimmed already)
		res = prev.AllocatedResources
	}
	s.noteRun(a) // before its task states are slimmed
	// only what the scheduler reads of it is kept (slim.go)
	c := s.slimAlloc(a, res)
	if prev, ok := s.Allocs[a.ID]; ok && prev.ModifyIndex == c.ModifyIndex && reflect.DeepEqual(prev, c) {
		// the same version read again (every relist lists them all):
		// the object the snapshot was made from stays, and nothing is
		// looked at again for it
		return
	}
	s.setAlloc(c)
}

// PutNode records a node.
func (s *State) PutNode(n *api.Node) {
	if n == nil || n.ID == "" {
		return
	}
	if prev, ok := s.Nodes[n.ID]; ok && n.ModifyIndex < prev.ModifyIndex {
		return
	}
	s.Nodes[n.ID] = slimNode(n) // only what the scheduler reads of it (slim.go)
	s.changed.node(n.ID)
}

// DeleteNode forgets a node.
func (s *State) DeleteNode(id string) {
	delete(s.Nodes, id)
	s.changed.node(id)
}

// Live reports whether an allocation holds resources: not terminal on the
// client and meant to run.
func Live(a *api.Allocation) bool {
	if a.DesiredStatus != "" && a.DesiredStatus != api.AllocDesiredStatusRun {
		return false
	}
	switch a.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return false
	}
	return true
}

// GroupAllocs returns the live allocations of a job's group.
func (s *State) GroupAllocs(namespace, job, group string) []*api.Allocation {
	return s.indexes.groups(s.Allocs).live[decide.Key{Namespace: orDefault(namespace), Job: job, Group: group}]
}

// ForReaders builds what the state builds the first time it is read (the
// index of allocations by group), so that readers that run together
// while no one writes only read it; the parse caches lock themselves.
func (s *State) ForReaders() { s.indexes.groups(s.Allocs) }

// Learn records a profile learned for a group (by request ID).
func (s *State) Learn(key string, p interference.Profile) {
	s.Learned[key] = p
	s.learnedGen++
	s.learnedChanged(key)
}

// Unlearn forgets the profile learned for a group (its job is gone).
func (s *State) Unlearn(key string) {
	if _, ok := s.Learned[key]; ok {
		delete(s.Learned, key)
		s.learnedGen++
		s.learnedChanged(key)
	}
}

// learnedChanged marks changed the job of the group a learned profile is
// for (by request ID, pin.GroupKey): only its allocations' profiles change
// (observations come every observe_interval). A key that does not parse
// has everything looked at again.
func (s *State) learnedChanged(key string) {
	k, ok := decide.ParseKey(key)
	if !ok {
		s.changed.all = true
		return
	}
	s.changed.job(JobKey(k.Namespace, k.Job))
}

// PutOwnJob is PutJob of a version the scheduler registered itself, put
// before Nomad's copy is read: until that copy is (an event, a relist),
// OwnJob says so, and a relist reads the job again even where Nomad lists
// the same modify index (Nomad sets fields of its own at registration).
func (s *State) PutOwnJob(j *api.Job) {
	s.PutJob(j)
	if j == nil || j.ID == nil {
		return
	}
	if s.ownJobs == nil {
		s.ownJobs = map[string]bool{}
	}
	s.ownJobs[jobKey(j)] = true
}

// OwnJob reports whether the model holds the scheduler's own copy of job
// key (PutOwnJob), not one read from Nomad.
func (s *State) OwnJob(key string) bool { return s.ownJobs[key] }
