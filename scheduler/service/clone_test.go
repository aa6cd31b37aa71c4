package service

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// richJob is a job with most of what a jobspec may say filled in.
func richJob() *api.Job {
	j := gated("rich", 25)
	j.Datacenters = []string{"dc1", "dc2"}
	j.Meta = map[string]string{"team": "ml"}
	j.Constraints = []*api.Constraint{api.NewConstraint("${attr.kernel.name}", "=", "linux")}
	j.Affinities = []*api.Affinity{api.NewAffinity("${node.datacenter}", "=", "dc1", 50)}
	j.Spreads = []*api.Spread{{Attribute: "${meta.rack}", Weight: new(int8(50)), SpreadTarget: []*api.SpreadTarget{{Value: "r1", Percent: 50}}}}
	j.Update = &api.UpdateStrategy{MaxParallel: new(2), Canary: new(1), MinHealthyTime: new(10 * time.Second)}
	j.Periodic = &api.PeriodicConfig{Enabled: new(true), Spec: new("*/5 * * * *")}
	j.ParameterizedJob = &api.ParameterizedJobConfig{Payload: "optional", MetaRequired: []string{"x"}}
	j.SubmitTime = new(time.Now().UnixNano())
	tg := j.TaskGroups[0]
	tg.Volumes = map[string]*api.VolumeRequest{"data": {Name: "data", Type: "host", Source: "data", ReadOnly: true}}
	tg.Services = []*api.Service{{Name: "web", PortLabel: "http", Tags: []string{"a"}, Checks: []api.ServiceCheck{{Name: "alive", Type: "http", Path: "/", Interval: time.Second}}}}
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http", To: 8080}}}}
	t := tg.Tasks[0]
	t.Driver = "docker"
	t.Config = map[string]any{"image": "vllm/vllm-openai:v0.6", "args": []any{"--port", 8080}, "mounts": []map[string]any{{"type": "bind", "readonly": true}}}
	t.Env = map[string]string{"CUDA_MPS_CLIENT_PRIORITY": "1"}
	t.Templates = []*api.Template{{EmbeddedTmpl: new("{{ key \"x\" }}"), DestPath: new("local/x")}}
	t.Resources.Devices[0].Constraints = []*api.Constraint{api.NewConstraint("${device.attr.memory}", ">=", "16 GiB")}
	t.Resources.Devices[0].Affinities = []*api.Affinity{api.NewAffinity("${device.model}", "=", "H100", 100)}
	return j
}

// addresses collects every pointer, slice and map v reaches.
func addresses(v reflect.Value, seen map[uintptr]bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			if v.Kind() == reflect.Pointer {
				seen[v.Pointer()] = true
			}
			addresses(v.Elem(), seen)
		}
	case reflect.Slice:
		if v.Len() > 0 {
			seen[v.Pointer()] = true
		}
		for i := range v.Len() {
			addresses(v.Index(i), seen)
		}
	case reflect.Map:
		if !v.IsNil() {
			seen[v.Pointer()] = true
			for it := v.MapRange(); it.Next(); {
				addresses(it.Value(), seen)
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				addresses(v.Field(i), seen)
			}
		}
	}
}

// cloneJob's copy equals the job, shares no memory with it (writing a pin
// into it leaves the job as it was), keeps the task config's types, and
// says what a JSON round trip says.
func TestCloneJobIsDeepAndEqual(t *testing.T) {
	j := richJob()
	before, err := json.Marshal(j)
	must.NoError(t, err)
	c, err := cloneJob(j)
	must.NoError(t, err)
	must.True(t, reflect.DeepEqual(j, c))
	orig, copied := map[uintptr]bool{}, map[uintptr]bool{}
	addresses(reflect.ValueOf(j), orig)
	addresses(reflect.ValueOf(c), copied)
	must.Greater(t, 40, len(orig))
	for p := range copied {
		must.MapNotContainsKey(t, orig, p, must.Sprint("the copy shares memory with the job"))
	}
	d := &placement.Decision{Request: "default/rich/g", Policy: "gpushare",
		Placements: []placement.Placement{{AllocID: "a", Node: "node-1", GPUs: []string{"GPU-1"}, Shares: []string{"GPU-1:0", "GPU-1:1"}}}}
	_, err = pin.Pin(c, "g", d)
	must.NoError(t, err)
	after, err := json.Marshal(j)
	must.NoError(t, err)
	must.Eq(t, string(before), string(after))
	viaJSON, err := copyJob(j)
	must.NoError(t, err)
	fresh, err := cloneJob(j)
	must.NoError(t, err)
	a, _ := json.Marshal(viaJSON)
	b, _ := json.Marshal(fresh)
	must.Eq(t, string(a), string(b))
	nilJob, err := cloneJob(nil)
	must.NoError(t, err)
	must.Nil(t, nilJob)
}

// A pin written into pin.Writable's copy of a job with most of what a
// jobspec may say leaves the job as it was, and writes what it writes
// into a deep copy.
func TestAPinIntoAWritableCopyLeavesTheJob(t *testing.T) {
	j := richJob()
	before, err := json.Marshal(j)
	must.NoError(t, err)
	deep, err := cloneJob(j)
	must.NoError(t, err)
	w := pin.Writable(j)
	d := &placement.Decision{Request: "default/rich/g", Policy: "gpushare",
		Placements: []placement.Placement{{AllocID: "a", Node: "node-1", GPUs: []string{"GPU-1"}, Shares: []string{"GPU-1:0", "GPU-1:1"}}}}
	for _, c := range []*api.Job{w, deep} {
		_, err = pin.Pin(c, "g", d)
		must.NoError(t, err)
		pin.Group(c, "g").Meta[pin.MetaSignature] = "signed"
	}
	after, err := json.Marshal(j)
	must.NoError(t, err)
	must.Eq(t, string(before), string(after))
	a, _ := json.Marshal(w)
	b, _ := json.Marshal(deep)
	must.Eq(t, string(b), string(a))
}

// BenchmarkWritableJob compares pin.Writable, the copy a pin writes into,
// with the deep copy it replaced (ratio).
func BenchmarkWritableJob(b *testing.B) {
	j := richJob()
	start := time.Now()
	for range b.N {
		_, _ = cloneJob(j)
	}
	deep := time.Since(start)
	b.ResetTimer()
	for range b.N {
		_ = pin.Writable(j)
	}
	b.StopTimer()
	b.ReportMetric(float64(deep)/float64(max(b.Elapsed(), 1)), "x-faster-than-deep-copy")
}

// cloneJob copies a job deeply, as Nomad stores a new version: the
// tests' copy of a job (a pin writes into pin.Writable's, which copies
// only what it writes). It walks the value by reflection, keeping a task
// config's integers, which a JSON round trip turns into floats.
func cloneJob(j *api.Job) (*api.Job, error) {
	if j == nil {
		return nil, nil
	}
	return deepCopy(reflect.ValueOf(j)).Interface().(*api.Job), nil
}

// deepCopy copies v with every pointer, slice, map and interface it
// reaches copied too. Unexported struct fields are copied as they are
// (time.Time's); the API's types share no memory through them.
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		n := reflect.New(v.Type().Elem())
		n.Elem().Set(deepCopy(v.Elem()))
		return n
	case reflect.Slice:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			n.Index(i).Set(deepCopy(v.Index(i)))
		}
		return n
	case reflect.Map:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		n := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			n.SetMapIndex(deepCopy(it.Key()), deepCopy(it.Value()))
		}
		return n
	case reflect.Interface:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		n := reflect.New(v.Type()).Elem()
		n.Set(deepCopy(v.Elem()))
		return n
	case reflect.Struct:
		n := reflect.New(v.Type()).Elem()
		n.Set(v)
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				n.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
		return n
	default:
		return v
	}
}
