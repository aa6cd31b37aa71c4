package plugin

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/gpushare/gpushare/internal/nomadplugin/structs"
)

// Time-slicing (issue 46 part 2; plugin/interposer/README.md,
// "Time-slicing"): each GPU has a rotation file in which the library's
// time-sliced tasks take turns; Reserve links it into the reservation's
// directory as sliceFile (beside the TGS channel) and names the
// reservation in it by the limits' timeslice_id. Stats reports each
// member's quantum, suspended time and turns on its shares.
const (
	sliceFile = "slice" // in a reservation's directory: its GPU's rotation
	sliceDir  = "slice" // in state_dir (0711): one rotation per GPU
)

// The rotation's layout (plugin/interposer/src/gpushare.h, struct
// gs_slice; src/slice.c checks its size and offsets): magic and version,
// then the library's state, then 64-byte members from offset 96.
const (
	sliceMagic      = 0x67737473 // "gsts"
	sliceVersion    = 1
	sliceSize       = 4096
	sliceMembersOff = 96
	sliceMemberSize = 64
	sliceMembers    = 48
	sliceCapped     = 1 // a member's flags (offset 12): GS_SLICE_CAPPED
)

// Stat names of a time-sliced reservation's shares (Nomad's client stats).
const (
	StatTimesliceQuantum   = "Time-slice quantum"
	StatTimesliceSuspended = "Time-slice suspended"
	StatTimesliceTurns     = "Time-slice turns"
)

// timesliceID names a reservation (its directory's name under state_dir)
// in its GPU's rotation: never 0, the same at every Reserve of the same
// shares, so Stats finds the reservation's shares from it.
func timesliceID(dirName string) uint64 {
	sum := sha256.Sum256([]byte("timeslice:" + dirName))
	return binary.LittleEndian.Uint64(sum[:8])>>1 | 1
}

// sliceRotationName names gpu's rotation in state_dir/slice, keyed as the
// TGS channel's name is.
func sliceRotationName(key []byte, gpu string) string {
	return "s-" + keyedDirName(key, "slice:"+gpu)[2:]
}

// sliceRotation returns the path of gpu's rotation, creating it if absent.
func sliceRotation(stateDir string, key []byte, gpu string) (string, error) {
	header := make([]byte, 8)
	binary.LittleEndian.PutUint32(header, sliceMagic)
	binary.LittleEndian.PutUint32(header[4:], sliceVersion)
	return perGPUFile(stateDir, sliceDir, gpu, sliceRotationName(key, gpu), "time-slice rotation", header, sliceSize)
}

// sliceMember is what a rotation says of one member.
type sliceMember struct {
	QuantumNs, SuspendedNs, Turns uint64
}

// readRotation reads a rotation's members by timeslice_id; an error when
// it is not a rotation of this version.
func readRotation(path string) (map[uint64]sliceMember, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) != sliceSize || binary.LittleEndian.Uint32(data) != sliceMagic || binary.LittleEndian.Uint32(data[4:]) != sliceVersion {
		return nil, errors.New(path + " is not a time-slice rotation of this version")
	}
	out := map[uint64]sliceMember{}
	for i := range sliceMembers {
		m := data[sliceMembersOff+i*sliceMemberSize:][:sliceMemberSize]
		id := binary.LittleEndian.Uint64(m)
		// free, never given a turn, or a capped task taking turns side by
		// side (flags: sliceCapped), which is not time-sliced
		if id == 0 || binary.LittleEndian.Uint64(m[48:]) == 0 || binary.LittleEndian.Uint32(m[12:])&sliceCapped != 0 {
			continue
		}
		out[id] = sliceMember{QuantumNs: binary.LittleEndian.Uint64(m[16:]),
			SuspendedNs: binary.LittleEndian.Uint64(m[40:]), Turns: binary.LittleEndian.Uint64(m[48:])}
	}
	return out, nil
}

// sliceStats reads the rotations of gpus and returns their members by the
// share IDs of each member's reservation (its directory's shares file).
// Nothing when the interposer is off, state_dir has no key yet, or no
// rotation has a member.
func sliceStats(ic InterposerConfig, gpus []string) map[string]sliceMember {
	if !ic.Enabled {
		return nil
	}
	key, err := os.ReadFile(filepath.Join(ic.StateDir, keyFile))
	if err != nil || len(key) < 32 {
		return nil
	}
	byID := map[uint64]sliceMember{}
	for _, gpu := range gpus {
		ms, err := readRotation(filepath.Join(ic.StateDir, sliceDir, sliceRotationName(key, gpu)))
		if err == nil {
			maps.Copy(byID, ms)
		}
	}
	if len(byID) == 0 {
		return nil
	}
	entries, err := os.ReadDir(ic.StateDir)
	if err != nil {
		return nil
	}
	out := map[string]sliceMember{}
	for _, e := range entries {
		m, ok := byID[timesliceID(e.Name())]
		if !ok || !e.IsDir() {
			continue
		}
		ids, err := os.ReadFile(filepath.Join(ic.StateDir, e.Name(), sharesFile))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		for _, id := range strings.Fields(string(ids)) {
			out[id] = m
		}
	}
	return out
}

// withSlice is a share's stats with its reservation's time-slicing.
func withSlice(ds *device.DeviceStats, m sliceMember) *device.DeviceStats {
	attrs := make(map[string]*structs.StatValue, len(ds.Stats.Attributes)+3)
	maps.Copy(attrs, ds.Stats.Attributes)
	i64 := func(v uint64) *int64 { x := int64(v); return &x }
	attrs[StatTimesliceQuantum] = &structs.StatValue{IntNumeratorVal: i64(m.QuantumNs / 1e6), Unit: "ms",
		Desc: "the quantum of the time-sliced task holding this share: its turn on the GPU"}
	attrs[StatTimesliceSuspended] = &structs.StatValue{IntNumeratorVal: i64(m.SuspendedNs / 1e6), Unit: "ms",
		Desc: "time the time-sliced task holding this share waited for its turn, in all"}
	attrs[StatTimesliceTurns] = &structs.StatValue{IntNumeratorVal: i64(m.Turns),
		Desc: "turns the time-sliced task holding this share was given"}
	out := *ds
	out.Stats = &structs.StatObject{Attributes: attrs}
	return &out
}
