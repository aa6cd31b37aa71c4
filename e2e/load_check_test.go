package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// check looks at Nomad's allocations after the load settled: no share in
// two live allocations, every allocation's shares a fraction of one GPU or
// whole GPUs, no failed allocation, and every job that waits is gated, has
// a reason at the scheduler and does not fit what is left of the cluster
// (or waits behind nodes the scheduler holds for a group ahead of it).
func (l *loadRun) check() {
	t := l.e.t
	if pid := l.serverPid(); pid > 0 {
		l.serverCPU, _ = procCPU(pid)
		l.serverHWM, _ = procHWM(pid)
	}
	l.evalsAtRest = l.evals()
	total, gpuNode, err := healthyShares(l.e.nomad)
	must.NoError(t, err)
	allocs, _, err := l.e.nomad.Allocations().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	must.NoError(t, err)
	jobs := map[string]*loadJob{}
	for _, j := range l.jobs {
		jobs[j.id] = j
	}
	owner := map[string]string{} // share -> live allocation
	used := map[string]int{}     // GPU -> shares held by live allocations
	for _, a := range allocs {
		j := jobs[a.JobID]
		if j == nil || a.DesiredStatus != "run" || a.AllocatedResources == nil {
			continue
		}
		var ids []string
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				ids = append(ids, d.DeviceIDs...)
			}
		}
		if len(ids) == 0 {
			continue
		}
		l.withShares++
		if why := validShares(ids, j.shares, total); why != "" {
			l.invalid = append(l.invalid, fmt.Sprintf("allocation %s of %s: %s", a.ID, j.id, why))
		}
		if a.ClientStatus != "running" && a.ClientStatus != "pending" {
			continue
		}
		l.live++
		for _, id := range ids {
			if other, ok := owner[id]; ok {
				l.twice = append(l.twice, fmt.Sprintf("share %s in allocations %s and %s", id, other, a.ID))
			}
			owner[id] = a.ID + " of " + j.id
			if sid, err := devicefn.ParseShareID(id); err == nil {
				used[sid.UUID]++
			}
		}
	}
	free := map[string]int{}
	for u, n := range total {
		free[u] = n - used[u]
		l.gpus++
		l.shares += n
		l.freeShares += free[u]
		if used[u] == 0 {
			l.idleGPUs++
		}
	}
	var unexplained []string
	for _, j := range l.waiting {
		job, _, err := l.e.nomad.Jobs().Info(j.id, nil)
		must.NoError(t, err)
		if len(pin.Gated(job)) == 0 {
			unexplained = append(unexplained, j.id+": waits at the scheduler but is no longer gated in Nomad")
			continue
		}
		var js service.JobStatus
		must.NoError(t, getJSON(l.s.http+"/v1/jobs/"+j.id, &js))
		if len(js.Groups) != 1 || js.Groups[0].State != "pending" || js.Groups[0].Reason == "" {
			unexplained = append(unexplained, fmt.Sprintf("%s: the scheduler says %+v", j.id, js.Groups))
			continue
		}
		// a group may wait with room free when the scheduler holds that
		// room for a group ahead of it in the queue that it would delay
		if strings.Contains(js.Groups[0].Reason, "are held for") {
			l.behindHold++
			continue
		}
		// fits counts whole free GPUs of a node, the scheduler asks
		// more GPUs to be connected (NVLink, one NUMA node)
		if j.shares > 100 && strings.Contains(js.Groups[0].Reason, "no connected cell free") {
			l.unconnected++
			continue
		}
		if fits(free, gpuNode, j.shares, j.count) {
			unexplained = append(unexplained, fmt.Sprintf("%s (%d x %d shares) fits what is free but waits: %s", j.id, j.count, j.shares, js.Groups[0].Reason))
		}
	}
	for what, list := range map[string][]string{
		"shares given twice": l.twice, "allocations with invalid shares": l.invalid, "failed allocations": l.failed,
		"jobs that wait though the cluster has room, or without a reason": unexplained,
	} {
		must.SliceEmpty(t, list, must.Sprintf("%s:\n%s", what, strings.Join(list, "\n")))
	}
	must.Eq(t, len(l.jobs), len(l.done)+len(l.waiting), must.Sprint("every job ran or waits"))
}

// validShares reports what is wrong with an allocation's shares, or "":
// they must be the shares asked for, all distinct, and either a fraction
// of one GPU or every share of whole GPUs.
func validShares(ids []string, want int, total map[string]int) string {
	if len(ids) != want {
		return fmt.Sprintf("%d shares, asked for %d", len(ids), want)
	}
	per := map[string]map[int]bool{}
	for _, id := range ids {
		sid, err := devicefn.ParseShareID(id)
		if err != nil {
			return err.Error()
		}
		if per[sid.UUID] == nil {
			per[sid.UUID] = map[int]bool{}
		}
		if per[sid.UUID][sid.Index] {
			return "share " + id + " twice"
		}
		per[sid.UUID][sid.Index] = true
	}
	if len(per) == 1 {
		return ""
	}
	for u, s := range per {
		if len(s) != total[u] {
			return fmt.Sprintf("%d of the %d shares of %s, and shares of %d GPUs", len(s), total[u], u, len(per))
		}
	}
	return ""
}

// fits reports whether count groups of shares would fit the free shares:
// a fraction on one GPU each, or whole free GPUs of one node each.
func fits(free map[string]int, gpuNode map[string]string, shares, count int) bool {
	f := map[string]int{}
	per := 0
	for u, n := range free {
		f[u] = n
	}
	for range count {
		placed := false
		if shares < 100 {
			// best fit: the GPU with the fewest free shares that suffice
			best := ""
			for u, n := range f {
				if n >= shares && (best == "" || n < f[best]) {
					best = u
				}
			}
			if best != "" {
				f[best] -= shares
				placed = true
			}
		} else {
			k := (shares + 99) / 100
			whole := map[string][]string{}
			for u, n := range f {
				if n == 100 {
					whole[gpuNode[u]] = append(whole[gpuNode[u]], u)
				}
			}
			for _, gs := range whole {
				if len(gs) >= k {
					for _, u := range gs[:k] {
						f[u] = 0
					}
					placed = true
					break
				}
			}
		}
		if !placed {
			return false
		}
		per++
	}
	return per == count
}

// churn purges the batch jobs (finished or waiting) and waits until the
// scheduler's records hold no more than the services: its waiting groups
// (/v1/groups), its jobs (/v1/health) and the items of its Nomad
// Variables under gpushare/state/ (the reasons hold why each service
// waits, or why it was placed where it runs).
func (l *loadRun) churn() {
	t := l.e.t
	var groups []service.Waiting
	must.NoError(t, getJSON(l.s.http+"/v1/groups", &groups))
	l.groups = len(groups)
	l.pinsItems, l.reasonsItems = l.stateItems()
	services, pinnedServices, waitingServices := 0, 0, 0
	for _, j := range l.jobs {
		if !j.batch {
			services++
		}
	}
	for _, j := range l.done {
		if !j.batch {
			pinnedServices++
		}
	}
	for _, j := range l.waiting {
		if !j.batch {
			waitingServices++
		}
	}
	purged := 0
	for _, j := range l.jobs {
		if j.batch {
			_, _, err := l.e.nomad.Jobs().Deregister(j.id, true, nil)
			must.NoError(t, err)
			purged++
		}
	}
	start := time.Now()
	var pins, reasons, jobs int
	l.e.eventually(2*time.Minute, "the scheduler's records to shrink to the services", func() bool {
		var h service.Health
		groups = groups[:0]
		if getJSON(l.s.http+"/v1/groups", &groups) != nil || getJSON(l.s.http+"/v1/health", &h) != nil {
			return false
		}
		pins, reasons = l.stateItems()
		jobs = h.Jobs
		return len(groups) == waitingServices && jobs == services && pins <= pinnedServices+1 && reasons <= waitingServices+pinnedServices
	})
	l.afterPurge = fmt.Sprintf("after purging %d batch jobs (%s): other record items=%d (<= %d pinned services + the key), reasons items=%d (<= %d waiting + %d pinned services' placement reasons), /v1/groups=%d, scheduler jobs=%d",
		purged, time.Since(start).Round(time.Second), pins, pinnedServices, reasons, waitingServices, pinnedServices, len(groups), jobs)
}

// stateItems counts the items of the scheduler's variables: its other
// records (the signing key, learned profiles, preemptions in flight) and
// its reasons-* shards.
func (l *loadRun) stateItems() (pins, reasons int) { return stateItems(l.e) }

func stateItems(e *env) (pins, reasons int) {
	metas, _, err := e.nomad.Variables().PrefixList("gpushare/state/", nil)
	if err != nil {
		return -1, -1
	}
	for _, m := range metas {
		v, _, err := e.nomad.Variables().Read(m.Path, nil)
		if err != nil {
			continue
		}
		if strings.HasPrefix(path.Base(m.Path), "reasons-") {
			reasons += len(v.Items)
		} else {
			pins += len(v.Items)
		}
	}
	return pins, reasons
}

// pinsTotal reads gpushare_pins_total from the scheduler's /metrics.
func (l *loadRun) pinsTotal() float64 { return schedPins(l.s) }

func schedPins(s *scheduler) float64 {
	resp, err := http.Get(s.http + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "gpushare_pins_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// procCPU is a process's user + system CPU time (/proc/<pid>/stat).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	// fields 14 and 15 of stat, in clock ticks of 1/100 s
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return time.Duration(u+k) * 10 * time.Millisecond, nil
}

// procHWM is a process's peak resident set size in KiB (VmHWM).
func procHWM(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// serverPid finds the Nomad server agent of the cluster.
func (l *loadRun) serverPid() int {
	want := filepath.Join(l.e.c.Dir(), "server", "agent.hcl")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(b), want) {
			return pid
		}
	}
	return 0
}

// evals counts Nomad's evaluations by status.
func (l *loadRun) evals() string {
	evs, _, err := l.e.nomad.Evaluations().List(nil)
	if err != nil {
		return err.Error()
	}
	by := map[string]int{}
	for _, ev := range evs {
		by[ev.Status]++
	}
	return fmt.Sprintf("%d evaluations (%d blocked, %d complete)", len(evs), by["blocked"], by["complete"])
}

// report logs the figures in one block of LOAD lines.
func (l *loadRun) report() {
	t := l.e.t
	pid := l.s.proc.Pid()
	cpu, err := procCPU(pid)
	must.NoError(t, err)
	hwm, err := procHWM(pid)
	must.NoError(t, err)
	var lat []time.Duration
	services, batch, pairs, batchDone, servicesDone := 0, 0, 0, 0, 0
	for _, j := range l.jobs {
		if j.batch {
			batch++
		} else {
			services++
		}
		if j.count > 1 {
			pairs++
		}
		if j.latency > 0 {
			lat = append(lat, j.latency)
		}
	}
	for _, j := range l.done {
		if j.batch {
			batchDone++
		} else {
			servicesDone++
		}
	}
	p50, p99 := percentiles(lat)
	pins := l.pins1 - l.pins0
	span := l.lastPin.Sub(l.start).Seconds()
	lines := []string{
		fmt.Sprintf("LOAD %d jobs (%d services, %d batch of 2-6s; %d groups of count 2; 10/25/50/100/200/400 shares) on %d clients, %d GPUs (%d shares), 1 scheduler",
			len(l.jobs), services, batch, pairs, len(loadClients), l.gpus, l.shares),
		fmt.Sprintf("LOAD burst: %d registrations in %s (%.0f/s, 4 goroutines)", len(l.jobs), l.registeredIn.Round(time.Millisecond), float64(len(l.jobs))/l.registeredIn.Seconds()),
		fmt.Sprintf("LOAD settled in %s: %d ran (%d services running, %d batch completed), %d wait at the gate (cluster full for them; %d of them behind nodes held for a group ahead, %d multi-GPU groups without a free connected cell), 0 lost",
			l.settledIn.Round(time.Second), len(l.done), servicesDone, batchDone, len(l.waiting), l.behindHold, l.unconnected),
		fmt.Sprintf("LOAD pins: %.0f in %.1fs from the burst's start to the last pin = %.1f pins/s; peak %.1f pins/s over 5s", pins, span, pins/max(span, 0.001), l.peakPins),
		fmt.Sprintf("LOAD registration -> running (last task started): p50=%s p99=%s over %d jobs", p50, p99, len(lat)),
		fmt.Sprintf("LOAD at rest: %d of %d shares free, %d GPUs idle", l.freeShares, l.shares, l.idleGPUs),
		fmt.Sprintf("LOAD shares: %d given twice among %d live allocations; %d invalid among %d allocations with shares; %d failed allocations", len(l.twice), l.live, len(l.invalid), l.withShares, len(l.failed)),
		fmt.Sprintf("LOAD scheduler: CPU %s (user+sys, %s during the load), peak RSS (VmHWM) %.1f MiB", cpu.Round(10*time.Millisecond), (cpu - l.cpu0).Round(10*time.Millisecond), float64(hwm)/1024),
		fmt.Sprintf("LOAD nomad server: CPU %s (user+sys, %s during the load), peak RSS %.1f MiB; %s at rest",
			l.serverCPU.Round(10*time.Millisecond), (l.serverCPU - l.serverCPU0).Round(10*time.Millisecond), float64(l.serverHWM)/1024, l.evalsAtRest),
		fmt.Sprintf("LOAD records before purge: other record items=%d, reasons items=%d, /v1/groups=%d", l.pinsItems, l.reasonsItems, l.groups),
		"LOAD records " + l.afterPurge,
	}
	t.Log("\n" + strings.Join(lines, "\n"))
}

// healthyShares counts the healthy shares of each GPU of the cluster
// (total) and names each GPU's node (gpuNode).
func healthyShares(c *api.Client) (total map[string]int, gpuNode map[string]string, err error) {
	nodes, _, err := c.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		return nil, nil, err
	}
	total, gpuNode = map[string]int{}, map[string]string{}
	for _, n := range nodes {
		if n.NodeResources == nil {
			continue
		}
		for _, d := range n.NodeResources.Devices {
			for _, in := range d.Instances {
				if sid, err := devicefn.ParseShareID(in.ID); err == nil && in.Healthy {
					total[sid.UUID]++
					gpuNode[sid.UUID] = n.ID
				}
			}
		}
	}
	return total, gpuNode, nil
}
