package openb

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/scheduler/placement"
)

// Stranding says why the GPU capacity left free at the end of a replay
// stayed free, judged against the pods that were turned away (capacity
// only shrinks, so none of them fits at the end unless the policy refused
// a pod that fitted). Every node's free GPU milli goes to one bucket:
// Model when no refused pod may use the node's model; CPUMemory when some
// refused pod's GPU request fits the node's free GPUs but its CPU or
// memory does not; Fits when some refused pod fits entirely; otherwise
// GPUShape (no refused pod's GPU request fits: the free fractions are too
// small or too few whole GPUs are free).
type Stranding struct {
	FreeMilli int64 `json:"free_milli"`
	GPUShape  int64 `json:"gpu_shape_milli"`
	CPUMemory int64 `json:"cpu_memory_milli"`
	Model     int64 `json:"model_milli"`
	Fits      int64 `json:"fits_milli"`
}

// Strand classifies the free GPU capacity of s against the refused pods.
func Strand(s *placement.Snapshot, refused []Pod) Stranding {
	kinds := gpuKinds(refused)
	var st Stranding
	for _, n := range s.Nodes() {
		if len(n.GPUs) == 0 {
			continue
		}
		spg := n.GPUs[0].Shares
		free := int64(n.FreeShares()) * 1000 / int64(spg)
		if free == 0 {
			continue
		}
		st.FreeMilli += free
		modelOK, gpuOK, fits := false, false, false
		res := n.Free()
		for _, p := range kinds {
			if len(p.Spec) > 0 && !slices.Contains(p.Spec, n.GPUs[0].Model) {
				continue
			}
			modelOK = true
			if !gpusFit(n, p, spg) {
				continue
			}
			gpuOK = true
			if res.CPU >= p.CPU && res.MemoryMiB >= p.MemoryMiB {
				fits = true
				break
			}
		}
		switch {
		case fits:
			st.Fits += free
		case gpuOK:
			st.CPUMemory += free
		case modelOK:
			st.GPUShape += free
		default:
			st.Model += free
		}
	}
	return st
}

// gpusFit reports whether the pod's GPU request fits the node's free
// shares: a fraction on one GPU, whole GPUs for whole requests.
func gpusFit(n *placement.Node, p Pod, spg int) bool {
	need, k := p.GPUMilli*spg/1000, 1
	if p.NumGPU > 1 || p.GPUMilli == 1000 {
		need, k = spg, p.NumGPU
	}
	for i := range n.GPUs {
		if g := &n.GPUs[i]; !g.Down && g.Free() >= need {
			if k--; k == 0 {
				return true
			}
		}
	}
	return false
}

// gpuKinds returns one pod per kind (GPUs, milli, CPU, memory, models) of
// the pods with a GPU request.
func gpuKinds(pods []Pod) []Pod {
	seen := map[string]bool{}
	var out []Pod
	for _, p := range pods {
		if p.TotalMilli() == 0 {
			continue
		}
		if k := kindKey(p); !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out
}

// kindKey identifies a pod's kind: GPUs, milli, CPU, memory, models.
func kindKey(p Pod) string {
	return strings.Join([]string{strconv.Itoa(p.NumGPU), strconv.Itoa(p.GPUMilli), strconv.FormatInt(p.CPU, 10),
		strconv.FormatInt(p.MemoryMiB, 10), strings.Join(p.Spec, "|")}, "/")
}
