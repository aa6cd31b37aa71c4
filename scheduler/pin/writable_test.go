package pin

import (
	"encoding/json"
	"testing"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// jsonOf is a job as Nomad's API would be sent it: what the tests compare.
func jsonOf(t testing.TB, j *api.Job) string {
	t.Helper()
	b, err := json.Marshal(j)
	must.NoError(t, err)
	return string(b)
}

// writableJobs are jobs whose every part a pin writes is there to write:
// a job-level gate moving to a second group, a pinned group pinned again
// (its constraints, env and MPS template rewritten), a user's own env
// and constraints.
func writableJobs(t *testing.T) map[string]*api.Job {
	t.Helper()
	gated := job(25)
	other := *gated.TaskGroups[0]
	other.Name = ptr("h")
	other.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux"}}
	gated.TaskGroups = append(gated.TaskGroups, &other)
	gated.TaskGroups[0].Constraints = nil
	gated.Constraints = []*api.Constraint{Gate(), {LTarget: "${node.class}", Operand: "=", RTarget: "gpu"}}

	pinned := runtimeJob("opportunistic", 25)
	pinned.TaskGroups[0].Tasks[1].Env = map[string]string{"USER_VAR": "1"}
	_, err := PinWith(pinned, "g", quarter, mps(0.5))
	must.NoError(t, err)
	return map[string]*api.Job{"job-level gate": gated, "pinned before": pinned, "gated group": job(25)}
}

// Every writer of a pin, run on Writable's copy, leaves the job it was
// copied from as it was, and writes into the copy what it writes into
// a deep copy.
func TestWritableLeavesTheJobAsItWas(t *testing.T) {
	d := &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
		{Node: "n2", GPUs: []string{"GPU-b"}, Shares: []string{"GPU-b:4", "GPU-b:5"}, Cell: "gpu 1", Reason: "packs GPU-b"},
	}}
	writers := map[string]func(*api.Job) error{
		"PinWith": func(j *api.Job) error { _, err := PinWith(j, "g", d, mps(0.5)); return err },
		"PinWith twice": func(j *api.Job) error {
			if _, err := PinWith(j, "g", quarter, mps(0.5)); err != nil {
				return err
			}
			_, err := PinWith(j, "g", d, Runtime{})
			return err
		},
		"Repeat": func(j *api.Job) error {
			p := runtimeJob("opportunistic", 25)
			if _, err := PinWith(p, "g", d, mps(0.5)); err != nil {
				return err
			}
			_, err := Repeat(j, "g", p.TaskGroups[0].Meta[MetaPlacement], "sig")
			return err
		},
		"Unpin": func(j *api.Job) error { Unpin(j, "g"); return nil },
		"meta": func(j *api.Job) error {
			Group(j, "g").Meta[MetaSignature] = "signed"
			return nil
		},
	}
	for name, orig := range writableJobs(t) {
		for wname, write := range writers {
			t.Run(name+"/"+wname, func(t *testing.T) {
				before := jsonOf(t, orig)
				var deep api.Job
				must.NoError(t, json.Unmarshal([]byte(before), &deep))
				w := Writable(orig)
				errW, errD := write(w), write(&deep)
				must.Eq(t, errD == nil, errW == nil)
				must.Eq(t, before, jsonOf(t, orig)) // the original is as it was
				must.Eq(t, jsonOf(t, &deep), jsonOf(t, w))
			})
		}
	}
	must.Nil(t, Writable(nil))
}

func BenchmarkWritable(b *testing.B) {
	j := runtimeJob("opportunistic", 25)
	for range b.N {
		_ = Writable(j)
	}
}
