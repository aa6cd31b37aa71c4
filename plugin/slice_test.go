package plugin

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/shoenig/test/must"
)

// Each GPU has one time-slice rotation, <state_dir>/slice/<keyed name>,
// made like its TGS channel (fixed size, magic "gsts" and version 1, 0666,
// in a 0711 directory), hard-linked into every reservation on the GPU as
// "slice" and mounted read-write at /run/gpushare/slice; each reservation's
// limits name it in the rotation (timeslice_id), the same id at every
// Reserve of the same shares, another for other shares.
func TestReserveInterposerTimeSliceRotation(t *testing.T) {
	p, _, state := interposerPlugin(t)
	a, err := p.Reserve(shares(3, 0, 10))
	must.NoError(t, err)
	b, err := p.Reserve(shares(3, 10, 35))
	must.NoError(t, err)
	key, err := os.ReadFile(filepath.Join(state, keyFile))
	must.NoError(t, err)
	rotation := filepath.Join(state, "slice", sliceRotationName(key, v100+"3"))
	data, err := os.ReadFile(rotation)
	must.NoError(t, err)
	must.SliceLen(t, 4096, data)
	must.Eq(t, uint32(0x67737473), binary.LittleEndian.Uint32(data))
	must.Eq(t, uint32(1), binary.LittleEndian.Uint32(data[4:]))
	must.Eq(t, 0o666, mode(t, rotation))
	must.Eq(t, os.ModeDir|0o711, mode(t, filepath.Join(state, "slice")))
	rot, err := os.Stat(rotation)
	must.NoError(t, err)
	ids := map[string]bool{}
	for _, res := range []*device.ContainerReservation{a, b} {
		dir := res.Envs[EnvLimits]
		st, err := os.Stat(filepath.Join(dir, "slice"))
		must.NoError(t, err)
		must.True(t, os.SameFile(rot, st))
		must.SliceContains(t, res.Mounts, &device.Mount{TaskPath: "/run/gpushare/slice", HostPath: filepath.Join(dir, "slice")})
		limits, err := os.ReadFile(filepath.Join(dir, "limits"))
		must.NoError(t, err)
		id := fmt.Sprintf("timeslice_id=%d\n", timesliceID(filepath.Base(dir)))
		must.StrContains(t, string(limits), id)
		ids[id] = true
	}
	must.MapLen(t, 2, ids)
	again, err := p.Reserve(shares(3, 0, 10))
	must.NoError(t, err)
	limits, err := os.ReadFile(filepath.Join(again.Envs[EnvLimits], "limits"))
	must.NoError(t, err)
	must.StrContains(t, string(limits), fmt.Sprintf("timeslice_id=%d\n", timesliceID(filepath.Base(a.Envs[EnvLimits]))))
}

// putMember writes a member into a rotation as the library does
// (src/gpushare.h, struct gs_slice_member).
func putMember(t *testing.T, path string, slot int, id, quantumNs, suspendedNs, turns uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	must.NoError(t, err)
	defer f.Close()
	m := make([]byte, 64)
	binary.LittleEndian.PutUint64(m, id)
	binary.LittleEndian.PutUint64(m[16:], quantumNs)
	binary.LittleEndian.PutUint64(m[40:], suspendedNs)
	binary.LittleEndian.PutUint64(m[48:], turns)
	_, err = f.WriteAt(m, int64(96+64*slot))
	must.NoError(t, err)
}

// flagMember sets the flags of the member in slot (offset 12).
func flagMember(t *testing.T, path string, slot int, flags uint32) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	must.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(binary.LittleEndian.AppendUint32(nil, flags), int64(96+64*slot+12))
	must.NoError(t, err)
}

// A time-sliced reservation's shares report its quantum, its suspended
// time and its turns, read from its GPU's rotation; the GPU's other
// shares (another reservation that never took a turn) do not.
func TestStatsReportTimeSlicing(t *testing.T) {
	p, _, state := interposerPlugin(t)
	a, err := p.Reserve(shares(3, 0, 10))
	must.NoError(t, err)
	b, err := p.Reserve(shares(3, 10, 35))
	must.NoError(t, err)
	key, err := os.ReadFile(filepath.Join(state, keyFile))
	must.NoError(t, err)
	rotation := filepath.Join(state, "slice", sliceRotationName(key, v100+"3"))
	putMember(t, rotation, 5, timesliceID(filepath.Base(a.Envs[EnvLimits])), 2e9, 1500e6, 7)
	putMember(t, rotation, 6, timesliceID(filepath.Base(b.Envs[EnvLimits])), 2e9, 0, 0)
	// a capped task taking turns side by side (flags 1) is not time-sliced
	c, err := p.Reserve(shares(3, 40, 70))
	must.NoError(t, err)
	putMember(t, rotation, 7, timesliceID(filepath.Base(c.Envs[EnvLimits])), 30e6, 700e6, 9)
	flagMember(t, rotation, 7, sliceCapped)

	ch, err := p.Stats(t.Context(), 50*time.Millisecond)
	must.NoError(t, err)
	var resp *device.StatsResponse
	select {
	case resp = <-ch:
	case <-time.After(time.Minute): // liveness only
		t.Fatal("no stats")
	}
	stats := map[string]*device.DeviceStats{}
	for _, g := range resp.Groups {
		for id, s := range g.InstanceStats {
			stats[id] = s
		}
	}
	for _, id := range shares(3, 0, 10) {
		a := stats[id].Stats.Attributes
		must.Eq(t, int64(2000), *a[StatTimesliceQuantum].IntNumeratorVal, must.Sprint(id))
		must.Eq(t, int64(1500), *a[StatTimesliceSuspended].IntNumeratorVal)
		must.Eq(t, int64(7), *a[StatTimesliceTurns].IntNumeratorVal)
		must.MapContainsKey(t, a, StatUtilization)
	}
	for _, id := range append(append(shares(3, 10, 35), shares(2, 0, 10)...), shares(3, 40, 70)...) {
		must.MapNotContainsKey(t, stats[id].Stats.Attributes, StatTimesliceSuspended, must.Sprint(id))
	}
}

// A file of another size where the rotation should be: Reserve says what
// to do.
func TestReserveInterposerRotationWrongSize(t *testing.T) {
	p, _, state := interposerPlugin(t)
	_, err := p.Reserve(shares(3, 0, 10))
	must.NoError(t, err)
	key, err := os.ReadFile(filepath.Join(state, keyFile))
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(state, "slice", sliceRotationName(key, v100+"4")), []byte("short"), 0o666))
	_, err = p.Reserve(shares(4, 0, 10))
	must.ErrorContains(t, err, "not a time-slice rotation of this version")
}
