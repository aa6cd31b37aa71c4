package devicefn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// GPU is what a Source knows about one physical GPU.
type GPU struct {
	// Index is the GPU's NVML index; Inventory.GPUs is sorted by it.
	Index int
	// UUID is the GPU's NVML UUID, for example "GPU-6b5fa173-...".
	UUID string
	// Model is the product name as NVML reports it ("Tesla V100-SXM2-16GB").
	Model string
	// MemoryMiB is the GPU's total framebuffer memory.
	MemoryMiB uint64
	// PCIBusID is the GPU's PCI bus ID ("00000000:06:00.0").
	PCIBusID string
	// NUMANode is the NUMA node the GPU is attached to; -1 when unknown.
	NUMANode int
	// ComputeCapability is "major.minor", for example "7.0".
	ComputeCapability string
	// Minor is the device minor number: the task needs /dev/nvidia<Minor>.
	// -1 when the source has no device node (fixtures).
	Minor int
	// MIG is true when MIG mode is enabled on the GPU.
	MIG bool
	// MIGDevices are the MIG devices of a MIG-enabled GPU, by GPU instance
	// ID; empty when MIG is off or no instance is configured.
	MIGDevices []MIGDevice
	// MIGProfiles are the GPU instance profiles a MIG-enabled GPU offers,
	// by slices; empty when the source cannot tell.
	MIGProfiles []MIGProfile
}

// Inventory is a node's GPUs and how they are connected.
type Inventory struct {
	DriverVersion string
	CUDAVersion   string
	// GPUs in NVML index order.
	GPUs []GPU
	// Links is the GPU-to-GPU matrix; Links[i][j] connects GPUs[i] and GPUs[j].
	Links Matrix
}

// Health is the health of one GPU.
type Health struct {
	UUID    string
	Healthy bool
	// Reason says why the GPU is unhealthy, for example
	// "XID 79: GPU has fallen off the bus". Empty when healthy.
	Reason string
}

// Stats is one sample of a GPU's counters.
type Stats struct {
	UUID string
	// UtilizationPct is the percentage of time the SMs were busy.
	UtilizationPct uint32
	// MemoryUtilizationPct is the percentage of time memory was read or written.
	MemoryUtilizationPct uint32
	MemoryUsedMiB        uint64
	MemoryTotalMiB       uint64
	PowerWatts           uint32
	TemperatureC         uint32
	Timestamp            time.Time
	// Processes are the holders of shares that run on the GPU, with the
	// SM utilisation of their processes: one entry per set of shares
	// (EnvShareIDs), so that the plugin reports each share's own use.
	// Empty when the source cannot tell (MIG, no process visible to NVML).
	Processes []ProcessUtil
	// MIGDevices are the counters of a MIG-enabled GPU's MIG devices that
	// the source can read: their memory. NVML reports no utilisation of a
	// MIG device; power and temperature are the GPU's.
	MIGDevices []MIGStats
}

// MIGStats is one sample of a MIG device's counters.
type MIGStats struct {
	UUID           string
	MemoryUsedMiB  uint64
	MemoryTotalMiB uint64
}

// Source is how the plugin sees GPUs. Implementations: devicefn/nvml (real
// GPUs) and devicefn/fixture (an HCL file). All methods are safe for
// concurrent use.
type Source interface {
	// Name names the source in logs ("nvml", "fixture /etc/gpus.hcl").
	Name() string
	// Inventory enumerates the GPUs and their link matrix.
	Inventory(ctx context.Context) (*Inventory, error)
	// Health returns the current health of every GPU. Sources that receive
	// health events (NVML XIDs) drain them here, so the plugin polls it.
	Health(ctx context.Context) ([]Health, error)
	// Stats samples every GPU's counters.
	Stats(ctx context.Context) ([]Stats, error)
	// Close releases the source.
	Close() error
}

// ErrUnavailable is wrapped by sources that cannot reach their hardware
// (for example when the NVML library cannot be loaded). The plugin reports
// no devices instead of failing.
var ErrUnavailable = errors.New("gpu source unavailable")

// Validate checks the inventory for what the device contract needs: unique
// UUIDs free of commas, colons and spaces, model names, and a link matrix
// with one row per GPU.
func (inv *Inventory) Validate() error {
	seen := make(map[string]int, len(inv.GPUs))
	for i, g := range inv.GPUs {
		switch {
		case g.UUID == "":
			return fmt.Errorf("gpu %d has no UUID", i)
		case strings.ContainsAny(g.UUID, ",: \t"):
			return fmt.Errorf("gpu %d UUID %q contains a comma, colon or space", i, g.UUID)
		case g.Model == "":
			return fmt.Errorf("gpu %d (%s) has no model name", i, g.UUID)
		}
		if j, dup := seen[g.UUID]; dup {
			return fmt.Errorf("gpus %d and %d have the same UUID %q", j, i, g.UUID)
		}
		seen[g.UUID] = i
		if len(g.MIGDevices) > 0 && !g.MIG {
			return fmt.Errorf("gpu %d (%s) has MIG devices but MIG mode off", i, g.UUID)
		}
		slices := 0
		for _, m := range g.MIGDevices {
			if err := m.Validate(); err != nil {
				return fmt.Errorf("gpu %d (%s): %w", i, g.UUID, err)
			}
			if j, dup := seen[m.UUID]; dup {
				return fmt.Errorf("gpu %d: MIG device %q has the UUID of gpu %d or of another MIG device", i, m.UUID, j)
			}
			seen[m.UUID] = i
			slices += m.Slices
			if slices > m.ParentSlices {
				return fmt.Errorf("gpu %d (%s): its MIG devices take %d slices, more than its %d", i, g.UUID, slices, m.ParentSlices)
			}
		}
	}
	if len(inv.Links) != len(inv.GPUs) {
		return fmt.Errorf("link matrix has %d rows for %d GPUs", len(inv.Links), len(inv.GPUs))
	}
	return inv.Links.Validate()
}
