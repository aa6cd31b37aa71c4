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
	for _, s := range []string{
		sample,
		"",
		"policy = \n",
		"polcy = \"x\"\n",
		`nomad { address = "https://nomad:4646" client_cert = "c" }`,
		`nomad { address = "nomad:4646" token = "t" token_file = "f" }`,
		`production_max_slowdown = 1`,
		`production_max_slowdown = -0.5`,
		`production_max_slowdown = 1e400`,
		`seed = -1`,
		`seed = 18446744073709551616`,
		`resync_interval = "-5m"`,
		`resync_interval = "9999999999999999999h"`,
		`leader { ttl = "0s" lock_delay = "1ns" variable_path = "" }`,
		`log_level = "DEBUG"`,
		`log_level = "verbose"`,
		`virtual_cluster "a" { cell { gpus = 0 count = -1 } }`,
		`virtual_cluster "a" {}` + "\n" + `virtual_cluster "a" {}`,
		`virtual_cluster "" { cell { gpus = 9223372036854775807 count = 9223372036854775807 } }`,
		`profile "x" { sm_util = 2 mem_bw = -1 }`,
		`profile "x" { sm_util = 0.5 mem_bw = 0.5 }` + "\n" + `profile "X" { sm_util = 0.5 mem_bw = 0.5 }`,
		`typical_request { shares = -50 weight = -1 }`,
		`typical_request { shares = 50 weight = 1 cpu = -1 memory = -1 models = ["", ""] }`,
		`typical_request { shares = 50 weight = 0.5 }` + "\n" + `typical_request { shares = 9223372036854775807 weight = 0.5 }`,
		`policy = "${file("/etc/passwd")}"`,
		`policy = upper("fgd")`,
		"nomad {\n namespaces = []\n}\n",
		"reservations = \"yes\"\n",
		"virtual_cluster {\n}\n",
		"\x00\xff{{{\"",
		"profile \"a\" \"b\" {}",
		"typical_request { shares = 1.5 weight = 1 }",
	} {
		f.Add(s)
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
