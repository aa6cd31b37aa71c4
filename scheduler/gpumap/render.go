package gpumap

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
)

const barWidth = 20

// Render writes the map for a terminal: one line per GPU with a bar of its
// used shares and the allocations that hold them.
func Render(w io.Writer, m *Map) error {
	var b strings.Builder
	if len(m.Nodes) == 0 {
		b.WriteString("no nodes with gpushare devices: is the nomad-device-gpushare plugin installed on the clients?\n")
	}
	totalShares, totalUsed, totalSlices, usedSlices, shared := 0, 0, 0, 0, false
	for _, n := range m.Nodes {
		used, shares := 0, 0
		for _, g := range n.GPUs {
			used += g.Used
			shares += g.Shares
		}
		unit := "shares"
		if n.Sharing == devicefn.SharingMIG {
			unit = "MIG slices"
			totalSlices += shares
			usedSlices += used
		} else {
			totalShares += shares
			totalUsed += used
			shared = true
		}
		mig := ""
		if n.MIG == devicefn.MIGShared {
			mig = "  mig=shared"
		}
		if n.MPSMissing() {
			mig += "  (MPS daemon " + n.MPSDaemon + ": tasks time-sliced)"
		}
		fmt.Fprintf(&b, "%s  %s  %d x %s  sharing=%s%s  %d/%d %s used (%.0f%%)\n",
			n.Name, short(n.ID), len(n.GPUs), n.Model, n.Sharing, mig, used, shares, unit, pct(used, shares))
		for _, g := range n.GPUs {
			health := ""
			if !g.Healthy {
				health = "  UNHEALTHY: " + g.Health
			}
			fmt.Fprintf(&b, "  GPU%-2d numa %-2d [%s] %4d/%-4d %s%s\n", g.Index, g.NUMANode, bar(g.Used, g.Shares), g.Used, g.Shares, users(g.Users), health)
			for _, inst := range g.MIG {
				state := "free"
				if len(inst.Users) > 0 {
					state = users(inst.Users)
				}
				if !inst.Healthy {
					state += "  UNHEALTHY"
				}
				if inst.Shares > 0 { // shared further: its shares
					fmt.Fprintf(&b, "    MIG %-10s %s  [%s] %4d/%-4d %s\n", inst.Profile, inst.UUID, bar(inst.Used, inst.Shares), inst.Used, inst.Shares, state)
					continue
				}
				fmt.Fprintf(&b, "    MIG %-10s %s  %s\n", inst.Profile, inst.UUID, state)
			}
		}
		b.WriteByte('\n')
	}
	if shared {
		fmt.Fprintf(&b, "cluster: %d/%d shares used (%.1f%%)\n", totalUsed, totalShares, pct(totalUsed, totalShares))
	}
	if totalSlices > 0 {
		fmt.Fprintf(&b, "cluster: %d/%d MIG slices used (%.1f%%)\n", usedSlices, totalSlices, pct(usedSlices, totalSlices))
	}
	for _, p := range m.Problems {
		fmt.Fprintf(&b, "problem: %s\n", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func bar(used, total int) string {
	if total <= 0 {
		return strings.Repeat(" ", barWidth)
	}
	full := (used*barWidth + total - 1) / total
	full = min(full, barWidth)
	return strings.Repeat("#", full) + strings.Repeat(".", barWidth-full)
}

func users(us []Usage) string {
	parts := make([]string, len(us))
	for i, u := range us {
		if u.Other {
			parts[i] = fmt.Sprintf("(another namespace):%d", u.Shares)
			continue
		}
		parts[i] = fmt.Sprintf("%s/%s[%s]:%d", u.Job, u.Group, short(u.AllocID), u.Shares)
	}
	return strings.Join(parts, " ")
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
