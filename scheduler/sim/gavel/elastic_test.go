package gavel

import (
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/shoenig/test/must"
)

var oneByFour = Cluster{Name: "1x4", Nodes: 1, GPUsPerNode: 4}

// TestElasticGrowsAndShrinks: on one server of four GPUs, job 0 (1000
// steps of type A, 1 step/s on one GPU) runs alone for 1000 s. Elastic,
// it grows into the three idle GPUs; job 1 (2 GPUs) arrives at 200 s and
// makes it shrink, newest replicas first, to give it two GPUs at once;
// job 0 never goes below its one GPU, never restarts, grows back when job
// 1 ends and ends well before 1000 s; the GPUs are busier. A job that
// could not start even if every grown replica went (4 GPUs, one of them
// half held by job 0) shrinks nothing and starts sooner, as job 0 ends
// sooner.
func TestElasticGrowsAndShrinks(t *testing.T) {
	thr := tinyThroughputs(t)
	jobs := []Job{{Type: "A", Steps: 1000, Scale: 1}, {Type: "A", Steps: 300, Arrival: 200, Scale: 2}}
	run := func(e Elastic) ([]Outcome, float64, []string) {
		var log []string
		opts := Options{Model: tinyModel(), MaxSlowdown: 0.4, Elastic: e, OnStep: func(now float64, as []decide.Action) {
			for _, a := range as {
				log = append(log, a.Kind.String()+" "+a.Group.Job)
			}
		}}
		out, util, err := Simulate("gpushare", jobs, oneByFour, thr, opts)
		must.NoError(t, err)
		return out, util, log
	}
	base, baseUtil, _ := run(Elastic{})
	must.InDelta(t, 1000, base[0].Finish, 1e-6)
	must.False(t, base[0].Elastic)
	must.Eq(t, 0, base[0].Grows)

	e := Elastic{Share: 1, Seed: 1}
	out, util, log := run(e)
	must.True(t, out[0].Elastic)
	must.Eq(t, 3+2, out[0].Grows) // to its max of four GPUs, and back when job 1 ends
	must.Eq(t, 2, out[0].Shrinks) // two GPUs for job 1, never its own
	must.Eq(t, 0, out[0].Moves)
	must.Eq(t, 0.0, out[0].Start)
	must.Eq(t, 200.0, out[1].Start) // no wait behind the grown job
	must.Less(t, base[0].Finish*0.8, out[0].Finish)
	must.Greater(t, baseUtil+0.1, util)
	// the same decisions for the same seed
	again, againUtil, againLog := run(e)
	must.Eq(t, out, again)
	must.Eq(t, util, againUtil)
	must.Eq(t, log, againLog)
}

func TestElasticShrinksOnlyWhenItHelps(t *testing.T) {
	thr := tinyThroughputs(t)
	jobs := []Job{{Type: "A", Steps: 1000, Scale: 1}, {Type: "A", Steps: 300, Arrival: 200, Scale: 4}}
	out, _, err := Simulate("gpushare", jobs, oneByFour, thr, Options{Model: tinyModel(), MaxSlowdown: 0.4, Elastic: Elastic{Share: 1, Seed: 1}})
	must.NoError(t, err)
	must.Eq(t, 3, out[0].Grows)
	must.Eq(t, 0, out[0].Shrinks)
	must.Eq(t, out[0].Finish, out[1].Start)
	must.Less(t, 700, out[1].Start)
}

// TestElasticShrinksNewestFirst: job 0 (ResNet-50, 4 replicas at most)
// grows into GPU 1 of its server (replica 1), then into both GPUs of the
// other (2 and 3). Job 1 needs a GPU at 100 s and is placed where it would
// go were the grown GPUs idle: GPU 1 of the first server, replica 1's. Job
// 0 gives back replicas newest first, 3 and 2 and then 1, before job 1
// would wait behind it, and grows again into the two GPUs it gave back
// that job 1 does not use, and into job 1's when job 1 ends.
func TestElasticShrinksNewestFirst(t *testing.T) {
	const r50 = "ResNet-50 (batch size 32)"
	thr, err := ReadThroughputs(strings.NewReader("gpu_type,job_type,scale_factor,throughput_steps_per_s\nv100,"+r50+",1,1\n"),
		strings.NewReader("gpu_type,job_a,scale_a,job_b,scale_b,norm_a,norm_b\nv100,"+r50+",1,"+r50+",1,0.6,0.6\n"))
	must.NoError(t, err)
	jobs := []Job{{Type: r50, Steps: 10000, Scale: 1}, {Type: r50, Steps: 100, Arrival: 100, Scale: 1}}
	placed := map[string][]string{}
	out, _, err := Simulate("gpushare", jobs, Cluster{Name: "2x2", Nodes: 2, GPUsPerNode: 2}, thr, Options{Model: tinyModel(), MaxSlowdown: 0.4,
		Elastic: Elastic{Share: 1, Seed: 1}, OnStep: func(now float64, as []decide.Action) {
			for _, a := range as {
				if a.Kind == decide.Pin {
					placed[a.Group.Job] = a.Decision.Placements[0].GPUs
				}
			}
		}})
	must.NoError(t, err)
	must.Eq(t, []string{"GPU-node-000-0"}, placed["job-000000"])
	must.Eq(t, []string{"GPU-node-000-1"}, placed["job-000001"])
	must.Eq(t, 100.0, out[1].Start)
	must.Eq(t, 3, out[0].Shrinks)
	must.Eq(t, 3+2+1, out[0].Grows)
	must.Eq(t, 0, out[0].Moves)
}
