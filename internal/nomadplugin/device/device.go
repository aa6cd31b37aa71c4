package device

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/structs"
)

// ApiVersion010 is the device plugin API version Nomad 0.9 to 1.11 speak.
const ApiVersion010 = "v0.1.0"

// DeviceTypeGPU is the device type of GPUs.
const DeviceTypeGPU = "gpu"

// ErrPluginDisabled is what Fingerprint returns when the plugin's config
// disables it; Nomad's client then stops fingerprinting it.
var ErrPluginDisabled = errors.New("device is not enabled")

// DevicePlugin is what a Nomad device plugin implements.
type DevicePlugin interface {
	base.BasePlugin

	// Fingerprint sends the device groups at once and then whenever they
	// change, until ctx is cancelled; it closes the channel when done.
	Fingerprint(ctx context.Context) (<-chan *FingerprintResponse, error)

	// Reserve says how a task gets the devices with the given IDs.
	Reserve(deviceIDs []string) (*ContainerReservation, error)

	// Stats sends the devices' statistics every interval until ctx is
	// cancelled; it closes the channel when done.
	Stats(ctx context.Context, interval time.Duration) (<-chan *StatsResponse, error)
}

// FingerprintResponse is one fingerprint: the device groups, or an error
// that ends the stream.
type FingerprintResponse struct {
	Devices []*DeviceGroup
	Error   error
}

// NewFingerprint is a fingerprint of the given groups.
func NewFingerprint(devices ...*DeviceGroup) *FingerprintResponse {
	return &FingerprintResponse{Devices: devices}
}

// NewFingerprintError is a fingerprint that failed.
func NewFingerprintError(err error) *FingerprintResponse {
	return &FingerprintResponse{Error: err}
}

// DeviceGroup is a set of identical devices: a job asks for
// "<vendor>/<type>/<name>" and constrains on the attributes.
type DeviceGroup struct {
	Vendor     string
	Type       string
	Name       string
	Devices    []*Device
	Attributes map[string]*structs.Attribute
}

// Validate applies the rules Nomad's client checks a fingerprinted group
// against: a vendor, type and name, devices with IDs, valid attributes.
func (d *DeviceGroup) Validate() error {
	var errs []error
	if d.Vendor == "" {
		errs = append(errs, errors.New("device vendor must be specified"))
	}
	if d.Type == "" {
		errs = append(errs, errors.New("device type must be specified"))
	}
	if d.Name == "" {
		errs = append(errs, errors.New("device name must be specified"))
	}
	for i, dev := range d.Devices {
		switch {
		case dev == nil:
			errs = append(errs, fmt.Errorf("device %d is nil", i))
		case dev.ID == "":
			errs = append(errs, fmt.Errorf("device %d: device ID must be specified", i))
		}
	}
	for k, a := range d.Attributes {
		if a == nil {
			errs = append(errs, fmt.Errorf("device attribute %q is nil", k))
		} else if err := a.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("device attribute %q invalid: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// Device is one device of a group.
type Device struct {
	ID         string
	Healthy    bool
	HealthDesc string
	HwLocality *DeviceLocality
}

// DeviceLocality is where a device sits.
type DeviceLocality struct {
	PciBusID string
}

// ContainerReservation is how a task gets its devices: environment
// variables, bind mounts and device nodes.
type ContainerReservation struct {
	Envs    map[string]string
	Mounts  []*Mount
	Devices []*DeviceSpec
}

// Mount is a bind mount into the task.
type Mount struct {
	TaskPath string
	HostPath string
	ReadOnly bool
}

// DeviceSpec is a device node made available to the task.
type DeviceSpec struct {
	TaskPath string
	HostPath string
	// CgroupPerms is the device cgroup permissions, a combination of
	// "r", "w" and "m".
	CgroupPerms string
}

// StatsResponse is one sample of every group's statistics, or an error
// that ends the stream.
type StatsResponse struct {
	Groups []*DeviceGroupStats
	Error  error
}

// NewStatsError is a sample that failed.
func NewStatsError(err error) *StatsResponse {
	return &StatsResponse{Error: err}
}

// DeviceGroupStats is the statistics of a group's devices, by device ID.
type DeviceGroupStats struct {
	Vendor        string
	Type          string
	Name          string
	InstanceStats map[string]*DeviceStats
}

// DeviceStats is one device's statistics.
type DeviceStats struct {
	// Summary is the statistic Nomad shows first (for example memory used).
	Summary   *structs.StatValue
	Stats     *structs.StatObject
	Timestamp time.Time
}
