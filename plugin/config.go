package plugin

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/nomadplugin/hclspec"
)

// configSpec is the plugin's configuration schema with its defaults.
var configSpec = hclspec.NewObject(map[string]*hclspec.Spec{
	"enabled": hclspec.NewDefault(
		hclspec.NewAttr("enabled", "bool", false),
		hclspec.NewLiteral("true"),
	),
	"shares_per_gpu": hclspec.NewDefault(
		hclspec.NewAttr("shares_per_gpu", "number", false),
		hclspec.NewLiteral("100"),
	),
	"sharing": hclspec.NewDefault(
		hclspec.NewAttr("sharing", "string", false),
		hclspec.NewLiteral(`"mps"`),
	),
	"mps": hclspec.NewDefault(
		hclspec.NewBlock("mps", false, hclspec.NewObject(map[string]*hclspec.Spec{
			"pipe_directory": hclspec.NewDefault(
				hclspec.NewAttr("pipe_directory", "string", false),
				hclspec.NewLiteral(`"/tmp/nvidia-mps"`),
			),
			"log_directory": hclspec.NewDefault(
				hclspec.NewAttr("log_directory", "string", false),
				hclspec.NewLiteral(`"/var/log/nvidia-mps"`),
			),
			"daemons": hclspec.NewDefault(
				hclspec.NewAttr("daemons", "string", false),
				hclspec.NewLiteral(`"`+MPSDaemonsReservation+`"`),
			),
			"control": hclspec.NewDefault(
				hclspec.NewAttr("control", "string", false),
				hclspec.NewLiteral(`"`+DefaultMPSControl+`"`),
			),
			"daemon_dir": hclspec.NewDefault(
				hclspec.NewAttr("daemon_dir", "string", false),
				hclspec.NewLiteral(`"`+DefaultMPSDaemonDir+`"`),
			),
			"gc_after": hclspec.NewDefault(
				hclspec.NewAttr("gc_after", "string", false),
				hclspec.NewLiteral(`"1h"`),
			),
		})),
		hclspec.NewLiteral(`{ pipe_directory = "/tmp/nvidia-mps", log_directory = "/var/log/nvidia-mps", daemons = "`+
			MPSDaemonsReservation+`", control = "`+DefaultMPSControl+`", daemon_dir = "`+DefaultMPSDaemonDir+`", gc_after = "1h" }`),
	),
	"interposer": hclspec.NewDefault(
		hclspec.NewBlock("interposer", false, hclspec.NewObject(map[string]*hclspec.Spec{
			"enabled": hclspec.NewDefault(
				hclspec.NewAttr("enabled", "bool", false),
				hclspec.NewLiteral("false"),
			),
			"library": hclspec.NewDefault(
				hclspec.NewAttr("library", "string", false),
				hclspec.NewLiteral(`"`+DefaultInterposerLibrary+`"`),
			),
			"state_dir": hclspec.NewDefault(
				hclspec.NewAttr("state_dir", "string", false),
				hclspec.NewLiteral(`"`+DefaultInterposerStateDir+`"`),
			),
			"gc_after": hclspec.NewDefault(
				hclspec.NewAttr("gc_after", "string", false),
				hclspec.NewLiteral(`"168h"`),
			),
			"unified_memory": hclspec.NewDefault(
				hclspec.NewAttr("unified_memory", "bool", false),
				hclspec.NewLiteral("false"),
			),
			"unified_oversubscription_pct": hclspec.NewDefault(
				hclspec.NewAttr("unified_oversubscription_pct", "number", false),
				hclspec.NewLiteral("100"),
			),
			"context_mib": hclspec.NewDefault(
				hclspec.NewAttr("context_mib", "number", false),
				hclspec.NewLiteral("0"),
			),
			"turn_ms": hclspec.NewDefault(
				hclspec.NewAttr("turn_ms", "number", false),
				hclspec.NewLiteral(strconv.Itoa(DefaultTurnMs)),
			),
		})),
		hclspec.NewLiteral(`{ enabled = false, library = "`+DefaultInterposerLibrary+`", state_dir = "`+DefaultInterposerStateDir+`", gc_after = "168h", unified_memory = false, unified_oversubscription_pct = 100, context_mib = 0, turn_ms = `+strconv.Itoa(DefaultTurnMs)+` }`),
	),
	"fixture": hclspec.NewDefault(
		hclspec.NewAttr("fixture", "string", false),
		hclspec.NewLiteral(`""`),
	),
	"ignored_gpu_ids": hclspec.NewDefault(
		hclspec.NewAttr("ignored_gpu_ids", "list(string)", false),
		hclspec.NewLiteral("[]"),
	),
	"fingerprint_period": hclspec.NewDefault(
		hclspec.NewAttr("fingerprint_period", "string", false),
		hclspec.NewLiteral(`"1m"`),
	),
	// mig { "NVIDIA A100-SXM4-40GB" = ["3g.20gb", "2g.10gb", "2g.10gb"] }
	"mig": hclspec.NewBlockAttrs("mig", "list(string)", false),
	"mig_instances": hclspec.NewDefault(
		hclspec.NewAttr("mig_instances", "string", false),
		hclspec.NewLiteral(`"`+devicefn.MIGWhole+`"`),
	),
	"device_groups": hclspec.NewDefault(
		hclspec.NewAttr("device_groups", "string", false),
		hclspec.NewLiteral(`"`+devicefn.DeviceGroupsModel+`"`),
	),
})

// Config is the decoded plugin block.
type Config struct {
	Enabled           bool             `cty:"enabled"`
	SharesPerGPU      int              `cty:"shares_per_gpu"`
	Sharing           string           `cty:"sharing"`
	MPS               MPSConfig        `cty:"mps"`
	Interposer        InterposerConfig `cty:"interposer"`
	Fixture           string           `cty:"fixture"`
	IgnoredGPUIDs     []string         `cty:"ignored_gpu_ids"`
	FingerprintPeriod string           `cty:"fingerprint_period"`
	// MIG is the MIG layout per GPU model: the profiles the plugin makes
	// the instances of every idle MIG-enabled GPU of that model.
	MIG map[string][]string `cty:"mig"`
	// MIGInstances is how MIG instances are offered: devicefn.MIGWhole
	// (each whole, as nvidia/gpushare-mig/<profile>) or devicefn.MIGShared
	// (each as shares of nvidia/gpushare, in a group per parent model and
	// profile).
	MIGInstances string `cty:"mig_instances"`
	// DeviceGroups is how whole GPUs are grouped for Nomad:
	// devicefn.DeviceGroupsModel (one nvidia/gpushare group per model on
	// the node) or devicefn.DeviceGroupsGPU (one group per GPU, named
	// devicefn.GPUGroupName; docs/device-contract.md).
	DeviceGroups string `cty:"device_groups"`
}

// multiGPU reports whether one task may hold several of the node's
// per-GPU groups (devicefn.AttrMultiGPU): one group per GPU, and the
// interposer on, which puts a task's GPUs back together from the
// GPUSHARE_GPU_<index> variables Reserve adds (plugin/interposer/src/compose.c).
// With per-reservation MPS daemons a task's processes would reach one
// daemon (the last block's CUDA_MPS_PIPE_DIRECTORY), which serves its own
// reservation's GPU only: there a reservation of whole GPUs runs without
// MPS (wholeWithoutMPS), which limits nothing on a GPU it holds alone.
func (c *Config) multiGPU() bool {
	return c.DeviceGroups == devicefn.DeviceGroupsGPU && c.Interposer.Enabled
}

// wholeWithoutMPS reports whether a reservation of whole GPUs runs without
// MPS: on nodes whose per-GPU groups one task may hold several of
// (multiGPU) under per-reservation MPS daemons, so that each block's
// reservation starts no daemon of its own that would hide the task's
// other GPUs. A whole GPU has no other tenant for MPS to share it with.
func (c *Config) wholeWithoutMPS() bool {
	return c.multiGPU() && c.Sharing == devicefn.SharingMPS && c.MPS.Daemons == MPSDaemonsReservation
}

// MPSConfig is the mps block. With daemons = "reservation" (the default)
// the plugin starts one MPS control daemon per reservation with control,
// under daemon_dir, whose defaults are the reservation's limits (mpsd.go);
// with daemons = "node" tasks use the operator's daemon at pipe_directory
// and log_directory, limited only by their environment.
type MPSConfig struct {
	PipeDirectory string `cty:"pipe_directory"`
	LogDirectory  string `cty:"log_directory"`
	Daemons       string `cty:"daemons"`
	Control       string `cty:"control"`
	DaemonDir     string `cty:"daemon_dir"`
	GCAfter       string `cty:"gc_after"`
}

// The values of mps.daemons, and the defaults of the mps block.
const (
	MPSDaemonsReservation = "reservation"
	MPSDaemonsNode        = "node"
	DefaultMPSControl     = "nvidia-cuda-mps-control"
	DefaultMPSDaemonDir   = "/run/gpushare-mps"
	// maxMPSDaemonDir keeps the daemons' UNIX socket paths
	// (daemon_dir/<16 hex>/pipe/<socket>) well under the kernel's 108 bytes.
	maxMPSDaemonDir = 48
)

// Defaults of the interposer block.
const (
	DefaultInterposerLibrary  = "/usr/local/lib/gpushare/libgpushare-cuda.so"
	DefaultInterposerStateDir = "/var/lib/gpushare/reservations"
)

// InterposerConfig is the interposer block: whether Reserve writes a
// reservation's limits and preloads libgpushare-cuda.so into its task
// (plugin/interposer/README.md).
type InterposerConfig struct {
	Enabled  bool   `cty:"enabled"`
	Library  string `cty:"library"`
	StateDir string `cty:"state_dir"`
	GCAfter  string `cty:"gc_after"`
	// UnifiedMemory turns an opportunistic task's device allocations into
	// managed memory the driver can evict to host when production needs
	// the GPU's memory (TGS); UnifiedOversubscriptionPct is how far beyond
	// its share, in percent of the share, such a task's managed memory may
	// go (plugin/interposer/README.md, "Unified memory").
	UnifiedMemory              bool `cty:"unified_memory"`
	UnifiedOversubscriptionPct int  `cty:"unified_oversubscription_pct"`
	// ContextMiB is charged against a task's memory cap for each of its
	// processes that uses the driver: the memory its CUDA context takes
	// (hundreds of MiB; 0, the default, charges none).
	ContextMiB int `cty:"context_mib"`
	// TurnMs is the round in which the capped tasks of one GPU take turns
	// when MPS does not run them (the library's src/slice.c, "Side by
	// side"): each has its share of it; 0 paces each on its own, as
	// before, and two contexts' switches then take time from them.
	TurnMs int `cty:"turn_ms"`
}

// DefaultTurnMs is interposer.turn_ms's default, MaxTurnMs its bound (the
// library's too).
const (
	DefaultTurnMs = 100
	MaxTurnMs     = 10000
)

// MaxContextMiB bounds interposer.context_mib.
const MaxContextMiB = 16384

// MaxUnifiedOversubscriptionPct bounds interposer.unified_oversubscription_pct:
// managed memory beyond the share lands in host memory when evicted.
const MaxUnifiedOversubscriptionPct = 1000

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("invalid gpushare plugin config")

// validate returns the fingerprint period, or an error that lists every
// invalid field with its allowed values.
func (c *Config) validate() (time.Duration, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if c.SharesPerGPU < 1 || c.SharesPerGPU > devicefn.MaxSharesPerGPU {
		bad("shares_per_gpu = %d: must be between 1 and %d", c.SharesPerGPU, devicefn.MaxSharesPerGPU)
	}
	switch c.Sharing {
	case devicefn.SharingMPS, devicefn.SharingTimeslice, devicefn.SharingExclusive:
	default:
		bad("sharing = %q: must be one of %q, %q or %q", c.Sharing, devicefn.SharingMPS, devicefn.SharingTimeslice, devicefn.SharingExclusive)
	}
	if m := c.MPS; c.Sharing == devicefn.SharingMPS {
		switch m.Daemons {
		case MPSDaemonsNode:
			if m.PipeDirectory == "" || m.LogDirectory == "" {
				bad("mps: pipe_directory and log_directory must not be empty when sharing = \"mps\"")
			}
		case MPSDaemonsReservation:
			if m.Control == "" {
				bad("mps.control = \"\": must name nvidia-cuda-mps-control (a path, or a name looked up on PATH)")
			}
			if d := filepath.Clean(m.DaemonDir); !filepath.IsAbs(m.DaemonDir) || d == "/" || len(d) > maxMPSDaemonDir {
				bad("mps.daemon_dir = %q: must be an absolute directory other than /, at most %d characters (UNIX socket paths are short; for example %q)", m.DaemonDir, maxMPSDaemonDir, DefaultMPSDaemonDir)
			}
			if d, err := time.ParseDuration(m.GCAfter); err != nil || d < time.Minute {
				bad("mps.gc_after = %q: must be a duration of at least 1m (for example \"1h\")", m.GCAfter)
			}
		default:
			bad("mps.daemons = %q: must be %q (one MPS control daemon per reservation, started by the plugin) or %q (the operator's daemon at pipe_directory)", m.Daemons, MPSDaemonsReservation, MPSDaemonsNode)
		}
	}
	if ip := c.Interposer; ip.Enabled {
		if !filepath.IsAbs(ip.Library) {
			bad("interposer.library = %q: must be the absolute path of libgpushare-cuda.so (from the release archive, or bin/ after make build)", ip.Library)
		}
		if !filepath.IsAbs(ip.StateDir) || filepath.Clean(ip.StateDir) == "/" {
			bad("interposer.state_dir = %q: must be an absolute directory other than / (for example %q)", ip.StateDir, DefaultInterposerStateDir)
		}
		if d, err := time.ParseDuration(ip.GCAfter); err != nil || d < time.Minute {
			bad("interposer.gc_after = %q: must be a duration of at least 1m (for example \"168h\")", ip.GCAfter)
		}
	} else if ip.UnifiedMemory {
		bad("interposer.unified_memory = true: needs interposer.enabled = true (the library makes the allocations managed memory)")
	}
	if ip := c.Interposer; ip.ContextMiB < 0 || ip.ContextMiB > MaxContextMiB {
		bad("interposer.context_mib = %d: must be between 0 and %d (MiB charged to each process of a task for its CUDA context)", ip.ContextMiB, MaxContextMiB)
	}
	if ip := c.Interposer; ip.TurnMs < 0 || ip.TurnMs > MaxTurnMs {
		bad("interposer.turn_ms = %d: must be between 0 and %d (the round in which capped tasks of a GPU take turns; 0: each paced on its own)", ip.TurnMs, MaxTurnMs)
	}
	if ip := c.Interposer; ip.UnifiedOversubscriptionPct < 0 || ip.UnifiedOversubscriptionPct > MaxUnifiedOversubscriptionPct {
		bad("interposer.unified_oversubscription_pct = %d: must be between 0 and %d (percent of the share an opportunistic task may hold beyond it as managed memory)",
			ip.UnifiedOversubscriptionPct, MaxUnifiedOversubscriptionPct)
	}
	for model, profiles := range c.MIG {
		if len(profiles) == 0 {
			bad("mig %q = []: give the profiles of its instances, for example [\"3g.20gb\", \"2g.10gb\", \"2g.10gb\"] (or leave the model out)", model)
		}
		for _, p := range profiles {
			if p == "" || strings.ContainsAny(p, " /,") {
				bad("mig %q: profile %q is not a MIG profile name such as \"3g.20gb\" (nvidia-smi mig -lgip lists them)", model, p)
			}
		}
	}
	switch c.MIGInstances {
	case devicefn.MIGWhole, devicefn.MIGShared:
	default:
		bad("mig_instances = %q: must be %q (each MIG instance offered whole, as nvidia/gpushare-mig/<profile>) or %q (each instance offered as shares of nvidia/gpushare, a share being 1/shares_per_gpu of its parent GPU)",
			c.MIGInstances, devicefn.MIGWhole, devicefn.MIGShared)
	}
	switch c.DeviceGroups {
	case devicefn.DeviceGroupsModel, devicefn.DeviceGroupsGPU:
	default:
		bad("device_groups = %q: must be %q (one device group per GPU model on a node, nvidia/gpushare/<model>) or %q (one device group per GPU, nvidia/gpushare/<model> GPU <index>, so Nomad takes each request of up to one GPU from one GPU)",
			c.DeviceGroups, devicefn.DeviceGroupsModel, devicefn.DeviceGroupsGPU)
	}
	period, err := time.ParseDuration(c.FingerprintPeriod)
	switch {
	case err != nil:
		bad("fingerprint_period = %q: not a duration (for example \"30s\" or \"1m\")", c.FingerprintPeriod)
	case period < 100*time.Millisecond:
		bad("fingerprint_period = %q: must be at least 100ms", c.FingerprintPeriod)
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return period, nil
}
