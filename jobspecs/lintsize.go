package jobspecs

import (
	"fmt"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// NodeGPUs is one node of the cluster and how many GPUs it has.
type NodeGPUs struct {
	Name  string
	GPUs  int
	Model string // its GPUs' model ("" when unknown)
}

// usualMaxGPUs is the most GPUs most machines hold (a DGX or HGX board):
// without the cluster's nodes, a request of more is a warning.
const usualMaxGPUs = 8

// CheckSize checks that each group's GPU request fits one node: an
// allocation's GPUs are all on one node, so a request of k whole GPUs
// (k × shares_per_gpu shares) never fits a cluster whose largest node has
// fewer. nodes are the cluster's (the scheduler's GPU map); nil when
// unknown, and then a request of more than 8 GPUs is a warning.
func CheckSize(job *api.Job, sharesPerGPU int, nodes []NodeGPUs) []Finding {
	if sharesPerGPU <= 0 {
		sharesPerGPU = devicefn.DefaultSharesPerGPU
	}
	var largest NodeGPUs
	for _, n := range nodes {
		if n.GPUs > largest.GPUs {
			largest = n
		}
	}
	var out []Finding
	for _, tg := range job.TaskGroups {
		count, ok := gpuCount(tg)
		if !ok || count <= sharesPerGPU || count%sharesPerGPU != 0 {
			continue // a fraction of one GPU, or not whole GPUs (Lint says so)
		}
		gpus := count / sharesPerGPU
		switch {
		case nodes != nil && gpus > largest.GPUs:
			has := "no node of the cluster has a GPU"
			if largest.GPUs > 0 {
				has = fmt.Sprintf("the cluster's largest node, %s, has %d", largest.Name, largest.GPUs)
			}
			out = append(out, Finding{Severity: Error, Group: *tg.Name, Message: fmt.Sprintf("count = %d shares is %d whole GPUs in one allocation, and an allocation's GPUs are all on one node: "+
				"%s, so it can never be placed; ask for at most %d shares per allocation (more allocations, count in the group, for more GPUs)", count, gpus, has, largest.GPUs*sharesPerGPU)})
		case nodes == nil && gpus > usualMaxGPUs:
			out = append(out, Finding{Severity: Warning, Group: *tg.Name, Message: fmt.Sprintf("count = %d shares is %d whole GPUs in one allocation, and an allocation's GPUs are all on one node: "+
				"few nodes have more than %d GPUs; pass -scheduler to check against the cluster's largest node", count, gpus, usualMaxGPUs)})
		}
	}
	return out
}

// gpuCount is the count of a group's gpushare device (false: none, or
// several, which Lint reports).
func gpuCount(tg *api.TaskGroup) (int, bool) {
	count, n := 0, 0
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d.Name != pin.DeviceName && !strings.HasPrefix(d.Name, pin.DeviceName+"/") {
				continue
			}
			n++
			count = 1
			if d.Count != nil {
				count = int(*d.Count)
			}
		}
	}
	return count, n == 1
}
