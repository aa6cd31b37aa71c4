package pin

import (
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// Spec changes with what Nomad replaces allocations for, and not with what
// it updates in place or what a pin writes.
func TestSpec(t *testing.T) {
	base := Spec(job(25), "g")
	must.NotEq(t, "", base)
	pinned := job(25)
	_, err := PinWith(pinned, "g", quarter, mps(0.5))
	must.NoError(t, err)
	pinned.TaskGroups[0].Meta[MetaClass] = job(25).TaskGroups[0].Meta[MetaClass]
	must.Eq(t, base, Spec(pinned, "g"), must.Sprint("the pin's constraints, meta and env are not the spec"))
	bare := job(25) // written without device constraints or meta at all
	bare.TaskGroups[0].Tasks[1].Resources.Devices[0].Constraints = nil
	pinnedBare := job(25)
	pinnedBare.TaskGroups[0].Tasks[1].Resources.Devices[0].Constraints = nil
	_, err = Pin(pinnedBare, "g", quarter)
	must.NoError(t, err)
	must.Eq(t, Spec(bare, "g"), Spec(pinnedBare, "g"))
	inPlace := map[string]func(j *api.Job){
		"count":  func(j *api.Job) { j.TaskGroups[0].Count = ptr(5) },
		"update": func(j *api.Job) { j.TaskGroups[0].Update = &api.UpdateStrategy{Canary: ptr(1)} },
		"group constraint": func(j *api.Job) {
			j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints, &api.Constraint{LTarget: "${attr.kernel.name}", RTarget: "linux", Operand: "="})
		},
	}
	for name, change := range inPlace {
		t.Run(name, func(t *testing.T) {
			j := job(25)
			change(j)
			must.Eq(t, base, Spec(j, "g"))
		})
	}
	destructive := map[string]func(j *api.Job){
		"env":      func(j *api.Job) { j.TaskGroups[0].Tasks[1].Env = map[string]string{"APP_VERSION": "2"} },
		"config":   func(j *api.Job) { j.TaskGroups[0].Tasks[1].Config = map[string]any{"image": "app:2"} },
		"memory":   func(j *api.Job) { j.TaskGroups[0].Tasks[1].Resources.MemoryMB = ptr(4096) },
		"meta":     func(j *api.Job) { j.TaskGroups[0].Meta["owner"] = "team-b" },
		"job meta": func(j *api.Job) { j.Meta["owner"] = "team-b" },
	}
	for name, change := range destructive {
		t.Run(name, func(t *testing.T) {
			j := job(25)
			change(j)
			must.NotEq(t, base, Spec(j, "g"))
		})
	}
}
