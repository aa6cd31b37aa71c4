package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/sim/gavel"
)

func main() {
	tr, cl, pa, pb := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	data := gavel.Embedded()
	thr, _ := data.Throughputs()
	jobs, err := data.Trace(tr)
	if err != nil {
		panic(err)
	}
	c, _ := gavel.ParseCluster(cl)
	opts := gavel.Options{MaxSlowdown: 0.6, MaxStretch: 0.4, ObserveAfter: 600}
	if len(os.Args) > 6 {
		var lo, hi float64
		fmt.Sscan(os.Args[5], &lo)
		fmt.Sscan(os.Args[6], &hi)
		opts.OnStep = func(now float64, as []decide.Action) {
			if now < lo || now > hi {
				return
			}
			for _, a := range as {
				if a.Kind == decide.Wait {
					continue
				}
				nodes := ""
				if a.Decision != nil {
					for _, p := range a.Decision.Placements {
						nodes += p.Node + fmt.Sprint(len(p.GPUs)) + " "
					}
				}
				fmt.Printf("t=%.0f %s %s %s %v\n", now, a.Kind, a.Group.Job, nodes, a.Hold)
			}
		}
	}
	res := map[string][]gavel.Outcome{}
	for _, p := range []string{pa, pb} {
		r, _, err := gavel.Simulate(p, jobs, c, thr, opts)
		if err != nil {
			panic(err)
		}
		sort.Slice(r, func(i, j int) bool { return r[i].Job.ID < r[j].Job.ID })
		res[p] = r
	}
	a, b := res[pa], res[pb]
	// tail: the top 2% JCTs of each
	top := func(r []gavel.Outcome) []int {
		idx := make([]int, len(r))
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(x, y int) bool { return r[idx[x]].JCT() > r[idx[y]].JCT() })
		return idx[:len(r)/50+1]
	}
	for name, r := range map[string][]gavel.Outcome{pa: a, pb: b} {
		fmt.Println("tail of", name)
		for _, i := range top(r) {
			fmt.Printf("  %d scale=%d arr=%.0f type=%q %s: start=%.0f jct=%.1fh | %s: start=%.0f jct=%.1fh shared=%.0f\n", a[i].Job.ID, a[i].Job.Scale, a[i].Job.Arrival, a[i].Job.Type, pa, a[i].Start, a[i].JCT()/3600, pb, b[i].Start, b[i].JCT()/3600, b[i].SharedFor)
		}
	}
}
