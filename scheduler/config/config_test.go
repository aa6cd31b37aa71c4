package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

const sample = `
nomad {
  address    = "http://127.0.0.1:4646"
  token_file = "/etc/gpushare/token"
  namespaces = ["default", "ml"]
  ui_address = "https://nomad.example.com:4646"
}
policy                  = "gpushare"
production_max_slowdown = 0.2
http_address            = "127.0.0.1:9000"
default_expected_runtime = "30m"
reservations             = false

leader {
  ttl = "10s"
}

virtual_cluster "research" {
  cell {
    gpus  = 4
    count = 1
    model = "Tesla V100-SXM2-16GB"
  }
}

profile "bert" {
  sm_util = 0.6
  mem_bw  = 0.4
}

typical_request {
  shares = 50
  cpu    = 4000
  memory = 16384
  weight = 0.75
}
typical_request {
  shares = 200
  models = ["Tesla V100-SXM2-16GB"]
  weight = 0.25
}
`

func TestParse(t *testing.T) {
	c, err := Parse("s.hcl", []byte(sample))
	must.NoError(t, err)
	must.NoError(t, c.Validate())
	must.Eq(t, 0.2, c.ProductionMaxSlowdown)
	must.Eq(t, []string{"default", "ml"}, c.Nomad.Namespaces)
	must.Eq(t, "https://nomad.example.com:4646", c.Nomad.UIAddress)
	must.Eq(t, "10s", c.Leader.TTL)
	must.Eq(t, "5s", c.Leader.LockDelay) // default kept
	must.Eq(t, "gpushare/leader", c.Leader.VariablePath)
	must.Eq(t, "30m", c.DefaultExpectedRuntime)
	must.False(t, c.ReservationsOn())
	must.True(t, Default().ReservationsOn())
	must.SliceLen(t, 1, c.VirtualClusters())
	must.Eq(t, 4, c.VirtualClusters()[0].Cells[0].GPUs)
	must.Eq(t, placement.Mix{{CPU: 4000, MemoryMiB: 16384, Shares: 50, Weight: 0.75},
		{Shares: 200, Models: []string{"Tesla V100-SXM2-16GB"}, Weight: 0.25}}, c.Mix())
}

func TestDefaultsAreValid(t *testing.T) {
	must.NoError(t, Default().Validate())
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Default()
	c.Nomad.Address = "127.0.0.1:4646"
	c.Nomad.UIAddress = "nomad.example.com"
	c.Policy = "magic"
	c.ProductionMaxSlowdown = 2
	c.Leader.TTL = "soon"
	c.DefaultExpectedRuntime = "0s"
	c.VCs = []VirtualCluster{{Name: "a", Cells: []Cell{{GPUs: 0, Count: 1}}}, {Name: "a"}}
	c.Profiles = []Profile{{Name: "x", SMUtil: 3}}
	c.Typical = []TypicalRequest{{Shares: 50, Weight: 0.5}}
	err := c.Validate()
	must.True(t, errors.Is(err, ErrInvalid))
	for _, want := range []string{"nomad.address", `nomad.ui_address "nomad.example.com"`, `unknown policy "magic"`, "production_max_slowdown = 2", `leader.ttl = "soon"`, `default_expected_runtime = "0s"`,
		`virtual_cluster "a" is defined twice`, `virtual_cluster "a" cell 0`, `profile "x"`, "typical_request: mix weights sum to 0.500"} {
		must.ErrorContains(t, err, want)
	}
}

func TestMemoryLimit(t *testing.T) {
	c, err := Parse("s.hcl", []byte("memory_limit = \"2GiB\"\n"))
	must.NoError(t, err)
	must.Eq(t, "2GiB", c.MemoryLimit)
	must.NoError(t, c.Validate())
	_, err = Parse("s.hcl", []byte("memory_limit = \"off\"\n"))
	must.NoError(t, err)
	c.MemoryLimit = "2G"
	must.ErrorContains(t, c.Validate(), `memory_limit = "2G": "2G" is not a size`)
	c.MemoryLimit = "0"
	must.ErrorContains(t, c.Validate(), "at least 1 byte")
	must.Eq(t, "", Default().MemoryLimit) // unset: GOMEMLIMIT, else the cgroup's
}

func TestSyntaxErrorsArePrecise(t *testing.T) {
	_, err := Parse("bad.hcl", []byte("policy = \n"))
	must.ErrorContains(t, err, "bad.hcl:1,")
	_, err = Parse("bad.hcl", []byte("polcy = \"x\"\n"))
	must.ErrorContains(t, err, "bad.hcl:1,1-6: Unsupported argument")
}

func TestToken(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tok")
	must.NoError(t, os.WriteFile(p, []byte("secret\n"), 0o600))
	c := Default()
	c.Nomad.TokenFile = p
	tok, err := c.Token()
	must.NoError(t, err)
	must.Eq(t, "secret", tok)
}

// Every block has its defaults: a file may set one option.
func TestOneOptionFile(t *testing.T) {
	c, err := Parse("one.hcl", []byte(`policy = "fgd"`))
	must.NoError(t, err)
	must.NoError(t, c.Validate())
	must.EqOp(t, "fgd", c.Policy)
	must.EqOp(t, Default().Nomad.Address, c.Nomad.Address)
	must.EqOp(t, Default().Leader.TTL, c.Leader.TTL)
	_, err = Parse("bad.hcl", []byte("policy = \"fgd\"\nbogus = 1\n"))
	must.ErrorContains(t, err, "bad.hcl:2")
}

// -check says every problem at once, each at its file:line: unknown keys
// and wrong values together.
func TestEveryProblemAtOnceWithItsLine(t *testing.T) {
	_, err := Parse("c.hcl", []byte("policy = \"fgd\"\nbogus = 1\nproduction_max_slowdown = 7\nleader {\n  ttl = \"soon\"\n}\n"))
	must.ErrorContains(t, err, `c.hcl:2,1-6: Unsupported argument`)
	must.ErrorContains(t, err, "c.hcl:3: production_max_slowdown = 7: must be between 0 and 1")
	must.ErrorContains(t, err, `c.hcl:5: leader.ttl = "soon": not a positive duration`)
	c, err := Parse("ok.hcl", []byte("production_max_slowdown = 7\n"))
	must.NoError(t, err)
	must.ErrorContains(t, c.Validate(), "ok.hcl:1: production_max_slowdown = 7")
}

// The opportunistic block: priority on by default, every problem at its
// file:line.
func TestOpportunistic(t *testing.T) {
	p, scale := Default().OpportunisticPriority()
	must.EqOp(t, 1, p)
	must.EqOp(t, 0.0, scale)

	c, err := Parse("o.hcl", []byte("opportunistic {\n  active_thread_scale = 0.5\n}\n"))
	must.NoError(t, err)
	must.NoError(t, c.Validate())
	p, scale = c.OpportunisticPriority()
	must.EqOp(t, 1, p) // the default kept
	must.EqOp(t, 0.5, scale)

	c, err = Parse("o.hcl", []byte("opportunistic {\n  mps_client_priority = 0\n}\n"))
	must.NoError(t, err)
	p, _ = c.OpportunisticPriority()
	must.EqOp(t, 0, p) // off

	c, err = Parse("o.hcl", []byte("policy = \"fgd\"\nopportunistic {\n  mps_client_priority = 3\n  active_thread_scale = 1.5\n}\n"))
	must.NoError(t, err)
	err = c.Validate()
	must.ErrorIs(t, err, ErrInvalid)
	must.ErrorContains(t, err, "o.hcl:3: opportunistic.mps_client_priority = 3: want 1 (below normal, the default) or 0")
	must.ErrorContains(t, err, "o.hcl:4: opportunistic.active_thread_scale = 1.5: must be within 0..1")

	_, err = Parse("o.hcl", []byte("opportunistic {\n  priority = 1\n}\n"))
	must.ErrorContains(t, err, "o.hcl:2,3-11: Unsupported argument")
}

// The API asks for a token whenever it listens beyond loopback, unless
// http_require_token says otherwise; on loopback only when it says so.
func TestRequireTokenBeyondLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8646": false, "[::1]:8646": false, "localhost:8646": false, "127.0.0.53:1": false,
		"0.0.0.0:8646": true, ":8646": true, "10.0.0.5:8646": true, "[::]:8646": true, "sched.example.com:8646": true,
	} {
		c, err := Parse("s.hcl", []byte(`http_address = "`+addr+`"`))
		must.NoError(t, err)
		must.EqOp(t, want, c.RequireToken(), must.Sprint(addr))
	}
	c, err := Parse("s.hcl", []byte("http_address = \"0.0.0.0:8646\"\nhttp_require_token = false\n"))
	must.NoError(t, err)
	must.False(t, c.RequireToken())
	c, err = Parse("s.hcl", []byte("http_require_token = true\n"))
	must.NoError(t, err)
	must.True(t, c.RequireToken())
}
