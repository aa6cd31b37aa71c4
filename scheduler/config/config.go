package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/internal/memlimit"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Config is the service configuration.
type Config struct {
	Nomad  Nomad  `hcl:"nomad,block"`
	Policy string `hcl:"policy,optional"`
	// ProductionMaxSlowdown bounds a production job's predicted slowdown.
	ProductionMaxSlowdown float64 `hcl:"production_max_slowdown,optional"`
	// HTTPAddress serves the web page /ui, /v1/health, /v1/gpus,
	// /v1/jobs/<id>, ... and /metrics.
	HTTPAddress string `hcl:"http_address,optional"`
	// HTTPCertFile and HTTPKeyFile, when set, serve the HTTP API over TLS.
	HTTPCertFile string `hcl:"http_cert_file,optional"`
	HTTPKeyFile  string `hcl:"http_key_file,optional"`
	// HTTPRequireToken makes the HTTP API (but /v1/health and /metrics)
	// require a Nomad ACL token that may read what is asked: read-job in
	// the namespace for /v1/jobs, /v1/groups and /v1/unpairs, nodes for
	// /v1/gpus. Unset, it is on whenever http_address listens beyond
	// loopback (RequireToken), and on loopback for a request a proxy
	// forwarded (the service checks its headers). The page (/ui) asks
	// for it in a form.
	HTTPRequireToken *bool `hcl:"http_require_token,optional"`
	// HTTPAllowedHosts are the Host header names the API answers besides
	// localhost and loopback addresses while http_address is a loopback
	// address: a web page cannot reach it by DNS rebinding (a name of its
	// own resolved to 127.0.0.1). Beyond loopback any Host is answered
	// (the token guards it).
	HTTPAllowedHosts []string `hcl:"http_allowed_hosts,optional"`
	LogLevel         string   `hcl:"log_level,optional"`
	LogJSON          bool     `hcl:"log_json,optional"`
	// MemoryLimit is the Go runtime's soft memory limit: a size, "off",
	// or "" (GOMEMLIMIT, else 90% of the cgroup's limit; memlimit.Choose).
	MemoryLimit string `hcl:"memory_limit,optional"`
	// ResyncInterval bounds how long a missed event can go unnoticed.
	ResyncInterval string `hcl:"resync_interval,optional"`
	// ObserveInterval is how often the device stats of allocations running
	// alone are sampled to learn interference profiles.
	ObserveInterval string `hcl:"observe_interval,optional"`
	// ElasticInterval is how often one elastic group (gpushare.elastic)
	// may be grown: at most one resize per interval, so none flaps.
	ElasticInterval string `hcl:"elastic_interval,optional"`
	// DefaultExpectedRuntime is the run time assumed for a job that
	// declares no gpushare.expected_runtime when the waiting groups are
	// ordered by response ratio.
	DefaultExpectedRuntime string `hcl:"default_expected_runtime,optional"`
	// Reservations lets the first waiting multi-GPU group that does not
	// fit hold the nodes that free first for it (backfilling); nil means
	// true.
	Reservations *bool `hcl:"reservations,optional"`
	// InPlacePins pins by node alone, a pin Nomad checks in place, every
	// group whose allocations Nomad keeps on one GPU each (nodes whose
	// plugin has device_groups = "gpu"); false pins every group by its
	// shares as before (docs/device-contract.md). nil means true.
	InPlacePins *bool            `hcl:"in_place_pins,optional"`
	Leader      Leader           `hcl:"leader,block"`
	VCs         []VirtualCluster `hcl:"virtual_cluster,block"`
	Profiles    []Profile        `hcl:"profile,block"`
	// Typical is the expected mix of requests that fragmentation is
	// measured against; empty means placement.DefaultMix.
	Typical []TypicalRequest `hcl:"typical_request,block"`
	// Seed drives the random choices of randomised policies.
	Seed uint64 `hcl:"seed,optional"`
	// where maps options set in a file to their place (Parse).
	where map[string]string
	// AdoptUngated places groups that ask for nvidia/gpushare without the
	// gate (registered with plain `nomad job run`) as if they were gated;
	// nil means true.
	AdoptUngated *bool `hcl:"adopt_ungated,optional"`
	// IdleGPUFirst gives a fractional group a GPU nobody uses while one is
	// free and shares GPUs only when none is (training clusters); off, the
	// placement core packs fractions to keep whole GPUs free (inference
	// clusters).
	IdleGPUFirst bool `hcl:"idle_gpu_first,optional"`
	// Introspection watches jobs that share a GPU (introspect.go).
	Introspection *Introspection `hcl:"introspection,block"`
	// Opportunistic is how opportunistic jobs yield to production ones on
	// a shared GPU at run time.
	Opportunistic *Opportunistic `hcl:"opportunistic,block"`
	// Timeslice is how time-sliced groups share a GPU (timeslice.go).
	Timeslice *Timeslice `hcl:"timeslice,block"`
}

// Opportunistic is what the pin writes into the GPU task of an
// opportunistic group placed on MPS GPUs (pin.Runtime), so that a
// production job on the same GPU keeps priority at run time, as TGS does.
// Time-sliced GPUs have no per-process priority: nothing is written there.
type Opportunistic struct {
	// MPSClientPriority is the CUDA_MPS_CLIENT_PRIORITY written: 1 (below
	// normal, the default) or 0 (write none). nil means 1.
	MPSClientPriority *int `hcl:"mps_client_priority,optional"`
	// ActiveThreadScale, within 0..1, scales the
	// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE the plugin gives an opportunistic
	// fraction (0.5: half its share's percentage); 0, the default, keeps
	// the plugin's.
	ActiveThreadScale float64 `hcl:"active_thread_scale,optional"`
}

// Nomad is how the service reaches Nomad.
type Nomad struct {
	Address   string `hcl:"address,optional"`
	Token     string `hcl:"token,optional"`
	TokenFile string `hcl:"token_file,optional"`
	Region    string `hcl:"region,optional"`
	// Namespace is the scheduler's own namespace, where its leader lock and
	// records (gpushare/* variables) live: a namespace of its own, which
	// ordinary submitters cannot write to, keeps its signing key from them.
	// Default: $NOMAD_NAMESPACE (Nomad sets it for a task), else "default".
	Namespace string `hcl:"namespace,optional"`
	// Namespaces are the namespaces whose jobs it schedules (default: all).
	Namespaces []string `hcl:"namespaces,optional"`
	CACert     string   `hcl:"ca_cert,optional"`
	ClientCert string   `hcl:"client_cert,optional"`
	ClientKey  string   `hcl:"client_key,optional"`
	TLSServer  string   `hcl:"tls_server_name,optional"`
	Insecure   bool     `hcl:"tls_skip_verify,optional"`
	// RequestTimeout bounds each request to Nomad but the event stream, so
	// that a hung Nomad does not stall scheduling.
	RequestTimeout string `hcl:"request_timeout,optional"`
	// UIAddress is where users open Nomad's web UI (its agents' address,
	// "https://nomad.example.com:4646"): the scheduler's page links jobs,
	// allocations and clients there. Empty: no such links (a Nomad built
	// from the module proxy has no UI).
	UIAddress string `hcl:"ui_address,optional"`
}

// Leader configures leader election through a Nomad Variable lock.
type Leader struct {
	VariablePath string `hcl:"variable_path,optional"`
	TTL          string `hcl:"ttl,optional"`
	LockDelay    string `hcl:"lock_delay,optional"`
}

// VirtualCluster is a tenant's guaranteed capacity, in cells.
type VirtualCluster struct {
	Name  string `hcl:"name,label"`
	Cells []Cell `hcl:"cell,block"`
	// Namespaces, when set, are the only Nomad namespaces whose jobs may
	// claim this VC with gpushare.vc.
	Namespaces []string `hcl:"namespaces,optional"`
}

// VC returns the virtual cluster of that name.
func (c *Config) VC(name string) (VirtualCluster, bool) {
	for _, v := range c.VCs {
		if v.Name == name {
			return v, true
		}
	}
	return VirtualCluster{}, false
}

// Admits reports whether a job of namespace ns may claim the VC.
func (v VirtualCluster) Admits(ns string) bool {
	if ns == "" {
		ns = "default"
	}
	return len(v.Namespaces) == 0 || slices.Contains(v.Namespaces, ns)
}

// Cell is Count cells of GPUs GPUs each (of one model, when set).
type Cell struct {
	GPUs  int    `hcl:"gpus"`
	Count int    `hcl:"count"`
	Model string `hcl:"model,optional"`
}

// Profile is a named interference profile.
type Profile struct {
	Name   string  `hcl:"name,label"`
	SMUtil float64 `hcl:"sm_util"`
	MemBW  float64 `hcl:"mem_bw"`
}

// TypicalRequest is one kind of request in the expected mix (FGD's
// typical pods): Shares per allocation (a fraction of shares_per_gpu, or
// whole GPUs as its multiple; 0 is CPU-only), its CPU (MHz) and memory
// (MiB), and its share of requests.
type TypicalRequest struct {
	Shares int      `hcl:"shares"`
	CPU    int64    `hcl:"cpu,optional"`
	Memory int64    `hcl:"memory,optional"`
	Models []string `hcl:"models,optional"`
	Weight float64  `hcl:"weight"`
}

// Default returns the configuration with every default.
func Default() *Config {
	return &Config{
		Nomad:                  Nomad{Address: "http://127.0.0.1:4646", Namespaces: []string{"*"}, RequestTimeout: "30s"},
		Policy:                 placement.PolicyGpushare,
		ProductionMaxSlowdown:  placement.DefaultMaxSlowdown,
		HTTPAddress:            "127.0.0.1:8646",
		LogLevel:               "info",
		ResyncInterval:         "5m",
		ObserveInterval:        "30s",
		ElasticInterval:        "1m",
		DefaultExpectedRuntime: "1h",
		Leader:                 Leader{VariablePath: "gpushare/leader", TTL: "15s", LockDelay: "5s"},
		Opportunistic:          &Opportunistic{MPSClientPriority: &defaultMPSClientPriority},
		Introspection:          &Introspection{Window: DefaultIntrospectionWindow, Samples: DefaultIntrospectionSamples},
		Timeslice:              &Timeslice{Quantum: DefaultTimesliceQuantum, MaxPerGPU: DefaultTimesliceMaxPerGPU},
	}
}

// defaultMPSClientPriority is CUDA's below-normal MPS client priority.
var defaultMPSClientPriority = 1

// Load reads an HCL file over the defaults. Syntax errors carry the file,
// line and column.
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, src)
}

// Parse reads HCL source over the defaults. Every block is optional: a
// file may hold only `policy = "fgd"`.
func Parse(filename string, src []byte) (*Config, error) {
	f, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diagErr(diags)
	}
	if body, ok := f.Body.(*hclsyntax.Body); ok {
		var missing []string
		for _, block := range []string{"nomad", "leader"} {
			if !slices.ContainsFunc(body.Blocks, func(b *hclsyntax.Block) bool { return b.Type == block }) {
				missing = append(missing, block+" {}")
			}
		}
		if len(missing) > 0 { // empty blocks keep their defaults; lines stay where they were
			src = append(append(slices.Clip(src), '\n'), strings.Join(missing, "\n")+"\n"...)
			if f, diags = hclparse.NewParser().ParseHCL(src, filename); diags.HasErrors() {
				return nil, diagErr(diags)
			}
		}
	}
	var file Config
	diags = gohcl.DecodeBody(f.Body, nil, &file)
	c := Default()
	c.Merge(&file)
	c.where = where(f.Body)
	if diags.HasErrors() {
		// say the values that are wrong too, not only the unknown keys
		msg := diagErr(diags).Error()
		if err := c.Validate(); err != nil {
			msg += "\n" + strings.TrimPrefix(err.Error(), ErrInvalid.Error()+":\n  ")
		}
		return nil, errors.New(msg)
	}
	return c, nil
}

// where maps each option set in the file ("policy", "nomad.address",
// "leader.ttl") to its place, "file:line".
func where(body hcl.Body) map[string]string {
	out := map[string]string{}
	b, ok := body.(*hclsyntax.Body)
	if !ok {
		return out
	}
	at := func(r hcl.Range) string { return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line) }
	for name, a := range b.Attributes {
		out[name] = at(a.SrcRange)
	}
	for _, blk := range b.Blocks {
		for name, a := range blk.Body.Attributes {
			out[blk.Type+"."+name] = at(a.SrcRange)
		}
	}
	return out
}

// located prefixes a problem with the place of the option it names.
func (c *Config) located(problem string) string {
	key := problem
	if i := strings.IndexAny(key, " :"); i >= 0 {
		key = key[:i]
	}
	if at, ok := c.where[key]; ok {
		return at + ": " + problem
	}
	return problem
}

func diagErr(diags hcl.Diagnostics) error {
	var msgs []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		m := d.Summary
		if d.Detail != "" {
			m += ": " + d.Detail
		}
		if d.Subject != nil {
			m = d.Subject.String() + ": " + m
		}
		msgs = append(msgs, m)
	}
	return errors.New(strings.Join(msgs, "\n"))
}

// Merge overlays the set fields of o on c.
func (c *Config) Merge(o *Config) {
	str := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	str(&c.Nomad.Address, o.Nomad.Address)
	str(&c.Nomad.Token, o.Nomad.Token)
	str(&c.Nomad.TokenFile, o.Nomad.TokenFile)
	str(&c.Nomad.Region, o.Nomad.Region)
	str(&c.Nomad.CACert, o.Nomad.CACert)
	str(&c.Nomad.ClientCert, o.Nomad.ClientCert)
	str(&c.Nomad.ClientKey, o.Nomad.ClientKey)
	str(&c.Nomad.TLSServer, o.Nomad.TLSServer)
	str(&c.Nomad.RequestTimeout, o.Nomad.RequestTimeout)
	str(&c.Nomad.Namespace, o.Nomad.Namespace)
	str(&c.Nomad.UIAddress, o.Nomad.UIAddress)
	c.Nomad.Insecure = c.Nomad.Insecure || o.Nomad.Insecure
	if len(o.Nomad.Namespaces) > 0 {
		c.Nomad.Namespaces = o.Nomad.Namespaces
	}
	str(&c.Policy, o.Policy)
	if o.ProductionMaxSlowdown != 0 {
		c.ProductionMaxSlowdown = o.ProductionMaxSlowdown
	}
	str(&c.HTTPAddress, o.HTTPAddress)
	str(&c.HTTPCertFile, o.HTTPCertFile)
	str(&c.HTTPKeyFile, o.HTTPKeyFile)
	if o.HTTPRequireToken != nil {
		c.HTTPRequireToken = o.HTTPRequireToken
	}
	if len(o.HTTPAllowedHosts) > 0 {
		c.HTTPAllowedHosts = o.HTTPAllowedHosts
	}
	str(&c.LogLevel, o.LogLevel)
	c.LogJSON = c.LogJSON || o.LogJSON
	str(&c.MemoryLimit, o.MemoryLimit)
	str(&c.ResyncInterval, o.ResyncInterval)
	str(&c.ObserveInterval, o.ObserveInterval)
	str(&c.ElasticInterval, o.ElasticInterval)
	str(&c.DefaultExpectedRuntime, o.DefaultExpectedRuntime)
	if o.Reservations != nil {
		c.Reservations = o.Reservations
	}
	if o.InPlacePins != nil {
		c.InPlacePins = o.InPlacePins
	}
	str(&c.Leader.VariablePath, o.Leader.VariablePath)
	str(&c.Leader.TTL, o.Leader.TTL)
	str(&c.Leader.LockDelay, o.Leader.LockDelay)
	c.VCs = append(c.VCs, o.VCs...)
	c.Profiles = append(c.Profiles, o.Profiles...)
	c.Typical = append(c.Typical, o.Typical...)
	if o.Seed != 0 {
		c.Seed = o.Seed
	}
	if o.AdoptUngated != nil {
		c.AdoptUngated = o.AdoptUngated
	}
	c.IdleGPUFirst = c.IdleGPUFirst || o.IdleGPUFirst
	if o.Opportunistic != nil {
		if c.Opportunistic == nil {
			c.Opportunistic = &Opportunistic{}
		}
		if o.Opportunistic.MPSClientPriority != nil {
			p := *o.Opportunistic.MPSClientPriority
			c.Opportunistic.MPSClientPriority = &p
		}
		if o.Opportunistic.ActiveThreadScale != 0 {
			c.Opportunistic.ActiveThreadScale = o.Opportunistic.ActiveThreadScale
		}
	}
	if c.Introspection == nil {
		c.Introspection = &Introspection{}
	}
	c.Introspection.merge(o.Introspection)
	if c.Timeslice == nil {
		c.Timeslice = &Timeslice{}
	}
	c.Timeslice.merge(o.Timeslice)
}

// MaxVCGPUs bounds the GPUs a virtual cluster guarantees (its cells'
// gpus times count, summed), far above any cluster, so that the quotas
// counted from them cannot overflow.
const MaxVCGPUs = 1 << 20

// ErrInvalid wraps the list of every problem Validate found.
var ErrInvalid = errors.New("invalid gpushare scheduler config")

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, c.located(fmt.Sprintf(format, a...))) }
	if !strings.HasPrefix(c.Nomad.Address, "http://") && !strings.HasPrefix(c.Nomad.Address, "https://") {
		bad("nomad.address %q: must start with http:// or https://", c.Nomad.Address)
	}
	if u := c.Nomad.UIAddress; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		bad("nomad.ui_address %q: must start with http:// or https:// (where users open Nomad's UI), or be empty", u)
	}
	if c.Nomad.Token != "" && c.Nomad.TokenFile != "" {
		bad("nomad: set token or token_file, not both")
	}
	if (c.Nomad.ClientCert == "") != (c.Nomad.ClientKey == "") {
		bad("nomad: client_cert and client_key go together")
	}
	if (c.HTTPCertFile == "") != (c.HTTPKeyFile == "") {
		bad("http_cert_file and http_key_file go together")
	}
	if _, err := placement.New(c.Policy, placement.Options{}); err != nil {
		bad("policy: %v", err)
	}
	if !(c.ProductionMaxSlowdown > 0 && c.ProductionMaxSlowdown < 1) {
		bad("production_max_slowdown = %v: must be between 0 and 1 (0.1 = at most 10%% slower)", c.ProductionMaxSlowdown)
	}
	for name, v := range map[string]string{"resync_interval": c.ResyncInterval, "observe_interval": c.ObserveInterval, "elastic_interval": c.ElasticInterval, "default_expected_runtime": c.DefaultExpectedRuntime, "leader.ttl": c.Leader.TTL, "leader.lock_delay": c.Leader.LockDelay, "nomad.request_timeout": c.Nomad.RequestTimeout} {
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			bad("%s = %q: not a positive duration (for example \"15s\")", name, v)
		}
	}

	if c.Leader.VariablePath == "" {
		bad("leader.variable_path must not be empty")
	}
	seen := map[string]bool{}
	for _, vc := range c.VCs {
		if seen["vc:"+vc.Name] {
			bad("virtual_cluster %q is defined twice", vc.Name)
		}
		seen["vc:"+vc.Name] = true
		if vc.Name == "" {
			bad("virtual_cluster needs a name")
		}
		for _, ns := range vc.Namespaces {
			if strings.TrimSpace(ns) == "" || ns == "*" {
				bad("virtual_cluster %q: namespaces lists %q: name each namespace whose jobs may claim it", vc.Name, ns)
			}
		}
		gpus := 0
		for i, cell := range vc.Cells {
			if cell.GPUs < 1 || cell.Count < 1 {
				bad("virtual_cluster %q cell %d: gpus and count must be at least 1", vc.Name, i)
			} else if cell.GPUs > MaxVCGPUs || cell.Count > MaxVCGPUs/cell.GPUs || gpus+cell.GPUs*cell.Count > MaxVCGPUs {
				bad("virtual_cluster %q cell %d: more than %d GPUs in all", vc.Name, i, MaxVCGPUs)
			} else {
				gpus += cell.GPUs * cell.Count
			}
		}
	}
	for _, p := range c.Profiles {
		if seen["p:"+p.Name] {
			bad("profile %q is defined twice", p.Name)
		}
		seen["p:"+p.Name] = true
		if p.SMUtil < 0 || p.SMUtil > 1 || p.MemBW < 0 || p.MemBW > 1 {
			bad("profile %q: sm_util and mem_bw must be between 0 and 1", p.Name)
		}
	}
	if err := c.Mix().Validate(); err != nil {
		bad("typical_request: %v (the weights are shares of requests)", err)
	}
	p, scale := c.OpportunisticPriority()
	if p != 0 && p != 1 {
		bad("opportunistic.mps_client_priority = %d: want 1 (below normal, the default) or 0 (write none); CUDA MPS has only these two client priorities", p)
	}
	if !(scale >= 0 && scale <= 1) {
		bad("opportunistic.active_thread_scale = %v: must be within 0..1 (0.5 = half the fraction's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; 0 keeps the plugin's)", scale)
	}
	if c.Introspection == nil {
		c.Introspection = Default().Introspection
	}
	c.Introspection.validate(bad)
	if c.Timeslice == nil {
		c.Timeslice = Default().Timeslice
	}
	c.Timeslice.validate(bad)
	if err := memlimit.Validate(c.MemoryLimit); err != nil {
		bad("%v", err)
	}
	switch strings.ToLower(c.LogLevel) {
	case "trace", "debug", "info", "warn", "error":
	default:
		bad("log_level %q: want trace, debug, info, warn or error", c.LogLevel)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w:\n  %s", ErrInvalid, strings.Join(errs, "\n  "))
	}
	return nil
}

// Token returns the Nomad token: token, else the contents of token_file,
// else $NOMAD_TOKEN. It is never logged.
func (c *Config) Token() (string, error) {
	switch {
	case c.Nomad.Token != "":
		return c.Nomad.Token, nil
	case c.Nomad.TokenFile != "":
		b, err := os.ReadFile(c.Nomad.TokenFile)
		if err != nil {
			return "", fmt.Errorf("nomad.token_file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return os.Getenv("NOMAD_TOKEN"), nil
}

// VirtualClusters converts the VCs for the placement core.
func (c *Config) VirtualClusters() []placement.VirtualCluster {
	out := make([]placement.VirtualCluster, 0, len(c.VCs))
	for _, vc := range c.VCs {
		pvc := placement.VirtualCluster{Name: vc.Name}
		for _, cell := range vc.Cells {
			pvc.Cells = append(pvc.Cells, placement.CellQuota{Model: cell.Model, GPUs: cell.GPUs, Count: cell.Count})
		}
		out = append(out, pvc)
	}
	return out
}

// Mix converts the typical requests for the placement core (nil: the
// core's default mix).
func (c *Config) Mix() placement.Mix {
	var m placement.Mix
	for _, t := range c.Typical {
		m = append(m, placement.Typical{CPU: t.CPU, MemoryMiB: t.Memory, Shares: t.Shares, Models: t.Models, Weight: t.Weight})
	}
	return m
}

// InPlacePinsOn reports whether groups are pinned by node where Nomad
// keeps each allocation on one GPU.
func (c *Config) InPlacePinsOn() bool { return c.InPlacePins == nil || *c.InPlacePins }

// ReservationsOn reports whether waiting multi-GPU groups hold nodes.
func (c *Config) ReservationsOn() bool { return c.Reservations == nil || *c.Reservations }

// OpportunisticPriority is the CUDA_MPS_CLIENT_PRIORITY written for
// opportunistic groups on MPS GPUs (0: none) and the scale of their
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (0: the plugin's).
func (c *Config) OpportunisticPriority() (int, float64) {
	o := c.Opportunistic
	if o == nil {
		return defaultMPSClientPriority, 0
	}
	p := defaultMPSClientPriority
	if o.MPSClientPriority != nil {
		p = *o.MPSClientPriority
	}
	return p, o.ActiveThreadScale
}

// AdoptUngatedOn reports whether ungated gpushare groups are placed.
func (c *Config) AdoptUngatedOn() bool { return c.AdoptUngated == nil || *c.AdoptUngated }

// VCNames lists the configured virtual clusters.
func (c *Config) VCNames() []string {
	out := make([]string, 0, len(c.VCs))
	for _, v := range c.VCs {
		out = append(out, v.Name)
	}
	return out
}

// Duration parses a validated duration field.
func Duration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}
