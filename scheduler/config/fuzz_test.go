package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// FuzzParseValidate: any source parses and validates without a panic;
// every refusal is an error with a message (Validate's wraps ErrInvalid),
// and a configuration Validate accepts is one the service can build its
// placement policy from.
func FuzzParseValidate(f *testing.F) {
	f.Add(sample)
	f.Add("")
	f.Add("policy = \n")
	f.Add("\x00\xff{{{\"")
	f.Add("profile \"a\" \"b\" {}")
	// every other seed is the smallest valid file (nomad and leader blocks) and more
	for _, s := range []string{
		"",
		"polcy = \"x\"",
		"nomad {\naddress = \"https://nomad:4646\"\nclient_cert = \"c\"\n}",
		"nomad {\naddress = \"nomad:4646\"\ntoken = \"t\"\ntoken_file = \"f\"\n}",
		"production_max_slowdown = 1",
		"production_max_slowdown = -0.5",
		"production_max_slowdown = 1e400",
		"seed = -1",
		"seed = 18446744073709551616",
		"resync_interval = \"-5m\"",
		"resync_interval = \"9999999999999999999h\"",
		"observe_interval = \"1ns\"",
		"log_level = \"DEBUG\"",
		"log_level = \"verbose\"",
		"virtual_cluster \"a\" {\ncell {\ngpus = 0\ncount = -1\n}\n}",
		"virtual_cluster \"a\" {}\nvirtual_cluster \"a\" {}",
		"virtual_cluster \"\" {\ncell {\ngpus = 9223372036854775807\ncount = 9223372036854775807\nmodel = \"\"\n}\n}",
		// found by the fuzzer: both were accepted, then refused by the policy or overflowed its quota
		"virtual_cluster \"\" {\ncell {\ngpus = 1\ncount = 1\n}\n}",
		"virtual_cluster \"v\" {\ncell {\ngpus = 4611686018427387904\ncount = 4\n}\n}",
		"virtual_cluster \"v\" {\ncell {\ngpus = 1048576\ncount = 1\n}\ncell {\ngpus = 1\ncount = 1\n}\n}",
		"profile \"x\" {\nsm_util = 2\nmem_bw = -1\n}",
		"profile \"x\" {\nsm_util = 0.5\nmem_bw = 0.5\n}\nprofile \"X\" {\nsm_util = 0.5\nmem_bw = 0.5\n}",
		"typical_request {\nshares = -50\nweight = -1\n}",
		"typical_request {\nshares = 50\nweight = 1\ncpu = -1\nmemory = -1\nmodels = [\"\", \"\"]\n}",
		"typical_request {\nshares = 50\nweight = 0.5\n}\ntypical_request {\nshares = 9223372036854775807\nweight = 0.5\n}",
		"typical_request {\nshares = 1.5\nweight = 1\n}",
		"policy = \"${file(\"/etc/passwd\")}\"",
		"policy = upper(\"fgd\")",
		"policy = \"fgd\"\nidle_gpu_first = true\nreservations = false\nadopt_ungated = false",
		"nomad {\nnamespaces = []\n}",
		"reservations = \"yes\"",
		"virtual_cluster {\n}",
	} {
		f.Add("nomad {}\nleader {}\n" + s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		c, err := Parse("fuzz.hcl", []byte(src))
		if err != nil {
			if c != nil || err.Error() == "" {
				t.Fatalf("Parse: config %v with error %q", c, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			if !errors.Is(err, ErrInvalid) || strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("Validate: %#v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, d := range []string{c.ResyncInterval, c.ObserveInterval, c.DefaultExpectedRuntime, c.Leader.TTL, c.Leader.LockDelay} {
			if Duration(d) <= 0 {
				t.Fatalf("accepted duration %q", d)
			}
		}
		for _, vc := range c.VCs {
			total := 0.0
			for _, cell := range vc.Cells {
				total += float64(cell.GPUs) * float64(cell.Count)
			}
			if total > MaxVCGPUs {
				t.Fatalf("virtual cluster %q guarantees %v GPUs", vc.Name, total)
			}
		}
		prof := interference.Default()
		for _, p := range c.Profiles {
			if err := (interference.Profile{Name: p.Name, SM: p.SMUtil, MemBW: p.MemBW}).Validate(); err != nil {
				t.Fatalf("accepted profile %q: %v", p.Name, err)
			}
		}
		if _, err := placement.New(c.Policy, placement.Options{Seed: c.Seed, Model: prof, VCs: c.VirtualClusters(), Mix: c.Mix(),
			MaxSlowdown: c.ProductionMaxSlowdown}); err != nil {
			t.Fatalf("Validate accepted a configuration the policy refuses: %v\n%s", err, src)
		}
	})
}
