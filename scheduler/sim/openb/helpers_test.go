package openb

import (
	"strconv"

	"github.com/gpushare/gpushare/scheduler/placement"
)

func placementOn(node string, gpus ...int) placement.Placement {
	p := placement.Placement{Node: node}
	for _, g := range gpus {
		p.GPUs = append(p.GPUs, "GPU-"+node+"-"+strconv.Itoa(g))
	}
	return p
}
