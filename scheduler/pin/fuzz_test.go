package pin

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// metaKeys are the jobspec meta keys the fuzzers fill, in the order of
// their arguments.
var metaKeys = []string{MetaVC, MetaClass, MetaProfile, MetaSMUtil, MetaMemBW, MetaMaxSlowdown, MetaExpected, MetaPlacement}

// fuzzMeta reads "key=value" lines; a key without "gpushare." gets it.
func fuzzMeta(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.SplitSeq(s, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if !strings.HasPrefix(k, "gpushare.") {
			k = "gpushare." + k
		}
		m[k] = v
	}
	return m
}

// FuzzRequest: any meta on the job and group, any counts and resources:
// Request never panics, every refusal wraps ErrNotPlaceable, and a
// returned request passes Validate and carries what the jobspec said.
func FuzzRequest(f *testing.F) {
	type seed struct {
		vc, class, profile, sm, bw, slowdown, expected, placement string
		group                                                     string
		count                                                     int
		shares                                                    uint64
		cpu, mem                                                  int
		devices                                                   uint8
	}
	for _, s := range []seed{
		{"research", "production", "", "0.8", "0.3", "0.1", "90m", "", "", 2, 25, 500, 1024, 1},
		{"", "normal", "ResNet-50 (batch size 32)", "", "", "", "", "", "", 1, 100, 0, 0, 1},
		{"", "", " resnet-50 (BATCH size 32) ", "", "", "", "", "", "sm_util=0.5", 1, 200, 0, 0, 1},
		{"", "opportunistic", "", "NaN", "NaN", "NaN", "", "", "", 1, 1, 1, 1, 1},
		{"", "", "", "Inf", "-0", "0.99999999999999999", "1ns", "", "", 1, 1, 1, 1, 1},
		{"", "", "", "1e-400", "0x1p-2", "1", "-1h", "{}", "", 1, 1, 1, 1, 1},
		{"", "vip", "", "", "", "", "", "", "class=production", 1, 1, 1, 1, 1},
		{"", "production", "", "", "", "", "", "", "class=", 1, 1, 1, 1, 1},
		{"", "", "no-such-model", "0.5", "0.5", "", "", "", "", 1, 1, 1, 1, 1},
		{"", "", "", "", "", "", "9223372036854775807ns", "", "expected_runtime=2562048h", 10001, 1, 1, 1, 1},
		{"", "", "", "", "", "", "", `{"nodes":["n"],"shares":["G:0"]}`, "", 0, 0, -1, -1, 1},
		{"", "", "", "", "", "", "", "not json", "", -5, 1 << 63, 1 << 62, 1 << 62, 2},
		{"", "", "", "", "", "", "", "", "", 1, 1<<64 - 1, 0, 0, 0},
		{"", "", "", "", "", "", "", "", "", 1, 1 << 40, 0, 0, 255},
	} {
		f.Add(s.vc, s.class, s.profile, s.sm, s.bw, s.slowdown, s.expected, s.placement, s.group, s.count, s.shares, s.cpu, s.mem, s.devices)
	}
	f.Fuzz(func(t *testing.T, vc, class, profile, sm, bw, slowdown, expected, placementMeta, group string, count int, shares uint64, cpu, mem int, devices uint8) {
		jobMeta := map[string]string{}
		for i, v := range []string{vc, class, profile, sm, bw, slowdown, expected, placementMeta} {
			jobMeta[metaKeys[i]] = v
		}
		groupMeta := fuzzMeta(group)
		var devs []*api.RequestedDevice
		for i := range int(devices % 4) {
			name := DeviceName
			if i%2 == 1 {
				name += "/" + vc
			}
			devs = append(devs, &api.RequestedDevice{Name: name, Count: &shares, Constraints: []*api.Constraint{
				{LTarget: "${device.model}", RTarget: profile}}})
		}
		j := &api.Job{ID: ptr("j"), Namespace: ptr(class), Meta: jobMeta, TaskGroups: []*api.TaskGroup{{
			Name: ptr("g"), Count: &count, Meta: groupMeta, Constraints: []*api.Constraint{Gate()},
			Tasks: []*api.Task{
				{Name: "none"},
				{Name: "t", Resources: &api.Resources{CPU: &cpu, MemoryMB: &mem, Devices: append(devs, &api.RequestedDevice{Name: "other/gpu"})}},
			},
		}}}
		models := []*interference.Model{nil, interference.Default()}
		r, err := Request(j, "g", models[devices%2])
		if err != nil {
			if !errors.Is(err, ErrNotPlaceable) {
				t.Fatalf("error %q does not wrap ErrNotPlaceable", err)
			}
		} else {
			if err := r.Validate(); err != nil {
				t.Fatalf("Request returned an invalid request: %v", err)
			}
			if int64(r.Shares) < 0 || uint64(r.Shares) != shares || r.Count != count {
				t.Fatalf("request %d x %d shares; the jobspec asked %d x %d", r.Count, r.Shares, count, shares)
			}
			if want := placement.Class(groupOr(groupMeta, jobMeta, MetaClass)); r.Class != want && !(want == "normal" && r.Class == "") {
				t.Fatalf("class %q, want %q", r.Class, want)
			}
		}
		// the other readers of a group's meta never panic either
		_, _ = ParseRecord(j, "g")
		_ = Pinned(j, "g")
		_ = Gated(j)
		_ = Wants(j.TaskGroups[0])
	})
}

func groupOr(group, job map[string]string, key string) string {
	if v := group[key]; v != "" {
		return v
	}
	return job[key]
}

// FuzzApplyMeta: ApplyMeta on a valid request with any meta never panics;
// it either wraps placement.ErrBadRequest or leaves a valid request.
func FuzzApplyMeta(f *testing.F) {
	f.Add("vc=research\nclass=production\nprofile=ResNet-50 (batch size 32)")
	f.Add("sm_util=0.7\nmem_bw=0.2")
	f.Add("sm_util=NaN\nmem_bw=0")
	f.Add("sm_util=+Inf")
	f.Add("sm_util=1\nmem_bw=1\nclass=opportunistic")
	f.Add("profile=\nsm_util=-0")
	f.Add("class=vip\nprofile=A3C")
	f.Add("profile= a3c ")
	f.Add("mem_bw=1e309")
	f.Fuzz(func(t *testing.T, s string) {
		r := placement.Request{ID: "j", Count: 1}
		err := ApplyMeta(&r, fuzzMeta(s), interference.Default())
		if err != nil {
			if !errors.Is(err, placement.ErrBadRequest) {
				t.Fatalf("error %q does not wrap placement.ErrBadRequest", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("ApplyMeta accepted an invalid request: %v", err)
		}
	})
}
