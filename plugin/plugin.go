package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/devicefn/nvml"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/gpushare/gpushare/internal/nomadplugin/hclspec"
	"github.com/gpushare/gpushare/internal/version"
	"github.com/hashicorp/go-hclog"
	goversion "github.com/hashicorp/go-version"
)

// pluginVersion is the gpushare version (internal/version, the one
// `gpushare version` prints) when it is a semantic version, else it as
// the build metadata of v0.0.0: Nomad refuses to load a plugin whose
// version it cannot parse, and a build stamped with a bare commit hash
// ("b0a6d7d") would otherwise leave every client without GPUs.
func pluginVersion() string {
	v := version.Version
	if _, err := goversion.NewVersion(v); err == nil { // as Nomad parses it
		return v
	}
	meta := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' {
			return r
		}
		return '-'
	}, v)
	if meta == "" {
		return "v0.0.0"
	}
	return "v0.0.0+" + meta
}

// SourceFactory opens the GPU source for a configuration.
type SourceFactory func(cfg *Config, logger hclog.Logger) (devicefn.Source, error)

// Plugin is the gpushare device plugin.
type Plugin struct {
	logger    hclog.Logger
	newSource SourceFactory
	// exists reports whether a host path exists; it decides which
	// /dev/nvidia* nodes Reserve hands to a task.
	exists func(path string) bool

	mu     sync.Mutex
	cfg    *Config
	period time.Duration
	source devicefn.Source
	// gpus is what the last fingerprint told Nomad, by GPU UUID.
	gpus map[string]*gpuState
	// groups is the last fingerprint's device groups of shares.
	groups []devicefn.Group
	// migs is what the last fingerprint offered of MIG instances, by MIG
	// device UUID; their health is their parent's, in gpus.
	migs map[string]devicefn.MIGInstance
	// migGroups are the last fingerprint's groups of whole MIG instances.
	migGroups []devicefn.MIGGroup
	// migShares are the MIG instances the last fingerprint offered as
	// shares (mig_instances = "shared"), by MIG device UUID.
	migShares map[string]migShare
	// noMIG holds the MIG-enabled GPUs without instances, to warn once.
	noMIG map[string]bool
	// layoutNotes is the MIG layout state last logged per GPU.
	layoutNotes map[string]string
	// lastGC is when the interposer's state_dir was last collected.
	lastGC time.Time
	// stateMu keeps the garbage collector from removing a directory that
	// Reserve is writing.
	stateMu sync.Mutex
	// mps is what the last fingerprint found at the MPS pipe directory
	// (sharing = "mps" only), to log its changes.
	mps *mpsStatus
	// mpsProbe is the last probe of per-reservation daemons (nil: probe
	// again); lastMPSGC is when their daemons were last checked.
	mpsProbe  *mpsStatus
	lastMPSGC time.Time
	// mpsMu serialises Reserve's and the fingerprint's work on the
	// per-reservation daemons.
	mpsMu sync.Mutex
	// mpsHolders says which daemon directories (by key) processes use;
	// procHolders over /proc by default.
	mpsHolders func(daemonDir string, keys map[string]bool) map[string]bool
}

type gpuState struct {
	gpu     devicefn.GPU
	healthy bool
	reason  string
}

var (
	_ device.DevicePlugin = (*Plugin)(nil)
	_ base.BasePlugin     = (*Plugin)(nil)
)

// New returns the plugin. newSource opens the GPU source; nil means the
// default: the fixture file when the config names one, NVML otherwise.
func New(logger hclog.Logger, newSource SourceFactory) *Plugin {
	if newSource == nil {
		newSource = DefaultSource
	}
	return &Plugin{
		logger:    logger.Named(devicefn.PluginName),
		newSource: newSource,
		exists:    func(p string) bool { _, err := os.Stat(p); return err == nil },
		mpsHolders: func(daemonDir string, keys map[string]bool) map[string]bool {
			return procHolders("/proc", daemonDir, keys)
		},
	}
}

// DefaultSource opens the fixture source when cfg.Fixture is set, and the
// NVML source otherwise.
func DefaultSource(cfg *Config, logger hclog.Logger) (devicefn.Source, error) {
	if cfg.Fixture != "" {
		return fixture.Open(cfg.Fixture, logger, nil)
	}
	return nvml.New(nvml.Options{Logger: logger}), nil
}

// PluginInfo implements base.BasePlugin.
func (p *Plugin) PluginInfo() (*base.PluginInfoResponse, error) {
	return &base.PluginInfoResponse{
		Type:              base.PluginTypeDevice,
		PluginApiVersions: []string{device.ApiVersion010},
		PluginVersion:     pluginVersion(),
		Name:              devicefn.PluginName,
	}, nil
}

// ConfigSchema implements base.BasePlugin.
func (p *Plugin) ConfigSchema() (*hclspec.Spec, error) { return configSpec, nil }

// SetConfig implements base.BasePlugin. Invalid values fail with a message
// that names each field and its allowed values.
func (p *Plugin) SetConfig(c *base.Config) error {
	var cfg Config
	if len(c.PluginConfig) != 0 {
		if err := hclspec.Decode(configSpec, c.PluginConfig, &cfg); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if len(cfg.MIG) == 0 {
		cfg.MIG = nil // an empty mig block is no block
	}
	period, err := cfg.validate()
	if err != nil {
		return err
	}
	if ip := cfg.Interposer; ip.Enabled {
		if _, err := os.Stat(ip.Library); err != nil {
			return fmt.Errorf("%w: interposer.library: %w; install libgpushare-cuda.so from the release archive there (or run make build), or set interposer.enabled = false", ErrConfig, err)
		}
		if os.Geteuid() != 0 {
			p.logger.Warn("interposer enabled but the plugin does not run as root: a task running as the plugin's user can rewrite its limits",
				"uid", os.Geteuid())
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.source != nil {
		_ = p.source.Close()
		p.source = nil
	}
	p.cfg, p.period = &cfg, period
	p.mpsProbe, p.lastMPSGC = nil, time.Time{}
	p.logger.Info("config set", "enabled", cfg.Enabled, "shares_per_gpu", cfg.SharesPerGPU,
		"sharing", cfg.Sharing, "fixture", cfg.Fixture, "ignored_gpu_ids", cfg.IgnoredGPUIDs,
		"fingerprint_period", period, "interposer", cfg.Interposer.Enabled,
		"interposer_library", cfg.Interposer.Library, "interposer_state_dir", cfg.Interposer.StateDir,
		"interposer_unified_memory", cfg.Interposer.UnifiedMemory,
		"mps_daemons", cfg.MPS.Daemons, "mps_control", cfg.MPS.Control, "mps_daemon_dir", cfg.MPS.DaemonDir,
		"mig_layouts", cfg.MIG)
	return nil
}

// config returns the configuration and the open source, opening it on
// first use.
func (p *Plugin) config() (*Config, devicefn.Source, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg == nil {
		return nil, nil, errors.New("gpushare plugin used before SetConfig")
	}
	if p.source == nil {
		src, err := p.newSource(p.cfg, p.logger)
		if err != nil {
			return p.cfg, nil, err
		}
		p.source = src
		p.logger.Info("gpu source opened", "source", src.Name())
	}
	return p.cfg, p.source, nil
}

// Fingerprint implements device.DevicePlugin. It sends the device groups
// at once and then whenever they, or the health of a GPU, change.
func (p *Plugin) Fingerprint(ctx context.Context) (<-chan *device.FingerprintResponse, error) {
	p.mu.Lock()
	cfg, period := p.cfg, p.period
	p.mu.Unlock()
	if cfg == nil {
		return nil, errors.New("gpushare plugin fingerprinted before SetConfig")
	}
	if !cfg.Enabled {
		return nil, device.ErrPluginDisabled
	}
	out := make(chan *device.FingerprintResponse)
	go p.fingerprintLoop(ctx, period, out)
	return out, nil
}

func (p *Plugin) fingerprintLoop(ctx context.Context, period time.Duration, out chan<- *device.FingerprintResponse) {
	defer close(out)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last *device.FingerprintResponse
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			timer.Reset(period)
		}
		resp := p.fingerprintOnce(ctx)
		if last != nil && sameFingerprint(last, resp) {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case out <- resp:
			last = resp
		}
	}
}

func sameFingerprint(a, b *device.FingerprintResponse) bool {
	if (a.Error == nil) != (b.Error == nil) {
		return false
	}
	if a.Error != nil {
		return a.Error.Error() == b.Error.Error()
	}
	return reflect.DeepEqual(a.Devices, b.Devices)
}

// fingerprintOnce reads the source once and records what it told Nomad.
func (p *Plugin) fingerprintOnce(ctx context.Context) *device.FingerprintResponse {
	cfg, src, err := p.config()
	if err != nil {
		p.logger.Error("cannot open the gpu source; retrying every fingerprint_period", "error", err)
		return device.NewFingerprintError(err)
	}
	inv, err := src.Inventory(ctx)
	if errors.Is(err, devicefn.ErrUnavailable) {
		p.logger.Warn("no gpus reported: the gpu source is unavailable", "source", src.Name(), "error", err)
		p.record(nil, nil, nil, nil)
		return device.NewFingerprint()
	}
	if err != nil {
		p.logger.Error("failed to list gpus", "source", src.Name(), "error", err)
		return device.NewFingerprintError(err)
	}
	health, err := src.Health(ctx)
	if err != nil {
		p.logger.Error("failed to read gpu health; keeping the last known health", "error", err)
	}
	healthBy := map[string]devicefn.Health{}
	for _, h := range health {
		healthBy[h.UUID] = h
	}

	skip := map[string]bool{}
	for _, id := range cfg.IgnoredGPUIDs {
		skip[id] = true
	}
	if ip := cfg.Interposer; ip.Enabled {
		p.maybeCollectGarbage(ip, time.Now())
	}
	if len(cfg.MIG) > 0 {
		inv = p.applyMIGLayouts(ctx, cfg, src, inv, skip)
	}
	groups := devicefn.Groups(inv, cfg.SharesPerGPU, cfg.Sharing, skip)
	var migGroups []devicefn.MIGGroup
	if cfg.MIGInstances == devicefn.MIGShared {
		groups = append(groups, devicefn.SharedMIGGroups(inv, cfg.SharesPerGPU, cfg.Sharing, skip)...)
	} else {
		migGroups = devicefn.MIGGroups(inv, skip)
	}
	p.record(inv, groups, migGroups, healthBy)
	var mps *mpsStatus
	// with per-reservation daemons that cannot start, Reserve refuses: the
	// shares are offered unhealthy, saying why
	mpsBlocks := false
	if cfg.Sharing == devicefn.SharingMPS && len(groups) > 0 {
		var st mpsStatus
		if cfg.MPS.Daemons == MPSDaemonsReservation {
			st = p.mpsReservationStatus(ctx, cfg.MPS, time.Now())
			mpsBlocks = !st.running()
		} else {
			st = checkMPSDaemon(cfg.MPS.PipeDirectory)
		}
		mps = &st
		p.noteMPS(st)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &device.FingerprintResponse{}
	for _, g := range groups {
		if cfg.DeviceGroups == devicefn.DeviceGroupsGPU && g.MIG == nil {
			continue // offered per GPU below
		}
		resp.Devices = append(resp.Devices, p.deviceGroup(g.Model, g.Attributes(), &g, mps, mpsBlocks))
	}
	if cfg.DeviceGroups == devicefn.DeviceGroupsGPU {
		gs := devicefn.GPUGroups(inv, cfg.SharesPerGPU, cfg.Sharing, skip)
		rankGPUGroups(inv, gs)
		for _, g := range gs {
			g.MultiGPU = cfg.multiGPU()
			resp.Devices = append(resp.Devices, p.deviceGroup(g.Name(), g.Attributes(), &g.Group, mps, mpsBlocks))
		}
	}
	// MIG instances are isolated by the hardware: no MPS, no note
	for _, g := range migGroups {
		dg := &device.DeviceGroup{
			Vendor:     devicefn.Vendor,
			Type:       devicefn.MIGDeviceType,
			Name:       g.Profile,
			Attributes: sdkAttributes(g.Attributes()),
		}
		for _, m := range g.Instances {
			st := p.gpus[m.Parent.UUID]
			dg.Devices = append(dg.Devices, &device.Device{
				ID:         m.UUID,
				Healthy:    st.healthy,
				HealthDesc: parentReason(m.Parent.UUID, st),
				HwLocality: &device.DeviceLocality{PciBusID: m.Parent.PCIBusID},
			})
		}
		resp.Devices = append(resp.Devices, dg)
	}
	return resp
}

// deviceGroup is the nvidia/gpushare device group name of g's GPUs, with
// attrs, every share of each GPU and its health (p.mu held).
func (p *Plugin) deviceGroup(name string, attrs map[string]devicefn.Attr, g *devicefn.Group, mps *mpsStatus, mpsBlocks bool) *device.DeviceGroup {
	note := ""
	if mps != nil {
		attrs[AttrMPSDaemon] = devicefn.StringAttr(mps.State)
		note = mps.Health
	}
	dg := &device.DeviceGroup{
		Vendor:     devicefn.Vendor,
		Type:       devicefn.DeviceType,
		Name:       name,
		Attributes: sdkAttributes(attrs),
	}
	for _, gpu := range g.GPUs {
		st, reason := p.gpus[gpu.UUID], ""
		if gpu.Parent != "" { // a shared MIG instance: its parent's health
			st = p.gpus[gpu.Parent]
			reason = parentReason(gpu.Parent, st)
		} else {
			reason = st.reason
		}
		healthy, desc := st.healthy, withMPSNote(st.healthy, reason, note)
		if healthy && mpsBlocks {
			healthy = false
		}
		for _, id := range devicefn.ShareIDs(gpu.UUID, g.GPUShares()) {
			dg.Devices = append(dg.Devices, &device.Device{
				ID:         id,
				Healthy:    healthy,
				HealthDesc: desc,
				HwLocality: &device.DeviceLocality{PciBusID: gpu.PCIBusID},
			})
		}
	}
	return dg
}

// record keeps what Nomad is told, so Reserve and Stats see the same GPUs,
// and logs every change of health.
func (p *Plugin) record(inv *devicefn.Inventory, groups []devicefn.Group, migGroups []devicefn.MIGGroup, health map[string]devicefn.Health) {
	p.mu.Lock()
	defer p.mu.Unlock()
	exposed := map[string]bool{}
	for _, g := range groups {
		for _, gpu := range g.GPUs {
			if gpu.Parent != "" {
				exposed[gpu.Parent] = true
			} else {
				exposed[gpu.UUID] = true
			}
		}
	}
	migs := map[string]devicefn.MIGInstance{}
	for _, g := range migGroups {
		for _, m := range g.Instances {
			exposed[m.Parent.UUID] = true
			migs[m.UUID] = m
		}
	}
	next := map[string]*gpuState{}
	if inv != nil {
		for _, g := range inv.GPUs {
			if !exposed[g.UUID] {
				continue
			}
			prev := p.gpus[g.UUID]
			st := &gpuState{gpu: g, healthy: true}
			if h, ok := health[g.UUID]; ok {
				st.healthy, st.reason = h.Healthy, h.Reason
			} else if prev != nil {
				st.healthy, st.reason = prev.healthy, prev.reason
			}
			switch {
			case prev != nil && prev.healthy && !st.healthy:
				p.logger.Warn("gpu unhealthy: its shares are no longer offered", "gpu", g.UUID, "reason", st.reason)
			case prev != nil && !prev.healthy && st.healthy:
				p.logger.Info("gpu recovered", "gpu", g.UUID)
			case prev == nil && g.MIG:
				profiles := make([]string, len(g.MIGDevices))
				for i, m := range g.MIGDevices {
					profiles[i] = m.Profile
				}
				offered := "nvidia/gpushare-mig/<profile>"
				if p.cfg != nil && p.cfg.MIGInstances == devicefn.MIGShared {
					offered = "shares of nvidia/gpushare, named " + strconv.Quote(devicefn.MIGGroupName(g.Model, "<profile>"))
				}
				p.logger.Info("MIG-enabled gpu found: its MIG instances are offered as "+offered, "gpu", g.UUID,
					"model", g.Model, "pci_bus_id", g.PCIBusID, "healthy", st.healthy, "mig_profiles", profiles)
			case prev == nil:
				p.logger.Info("gpu found", "gpu", g.UUID, "model", g.Model, "pci_bus_id", g.PCIBusID, "healthy", st.healthy)
			}
			next[g.UUID] = st
		}
		for _, g := range inv.GPUs {
			if g.MIG && len(g.MIGDevices) == 0 && !p.noMIG[g.UUID] {
				p.logger.Warn("MIG-enabled gpu has no MIG instances: nothing of it is offered; create instances (nvidia-smi mig -cgi <profiles> -C) or disable MIG (nvidia-smi -i <gpu> -mig 0)", "gpu", g.UUID)
			}
		}
	}
	p.noMIG = map[string]bool{}
	if inv != nil {
		for _, g := range inv.GPUs {
			if g.MIG && len(g.MIGDevices) == 0 {
				p.noMIG[g.UUID] = true
			}
		}
	}
	p.gpus, p.groups, p.migs, p.migGroups = next, groups, migs, migGroups
	p.migShares = migSharesOf(inv, groups)
}

// noteMPS logs when the MPS daemon's state changes (first fingerprint
// included). Shares stay healthy without the daemon: CUDA then runs the
// tasks time-sliced, which works, but without MPS's limits.
func (p *Plugin) noteMPS(st mpsStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mps != nil && *p.mps == st {
		return
	}
	switch {
	case st.running():
		p.logger.Info("MPS control daemon answers", "detail", st.Health)
	case p.cfg != nil && p.cfg.MPS.Daemons == MPSDaemonsReservation:
		p.logger.Error("MPS control daemons cannot be started; shares are offered unhealthy until they can", "detail", st.Health)
	default:
		p.logger.Warn("MPS control daemon not usable; shares stay healthy but run without MPS", "detail", st.Health)
	}
	p.mps = &st
}
