package openb

import (
	"embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

//go:embed data/*.csv
var embedded embed.FS

// Traces are the workloads of the FGD paper that this package knows, in
// report order.
var Traces = []string{"default", "gpushare40", "multigpu50"}

// Node is one row of openb_node_list_gpu_node.csv.
type Node struct {
	Name      string
	CPU       int64 // milli-cores
	MemoryMiB int64
	GPUs      int
	Model     string
}

// Pod is one row of an openb pod list.
type Pod struct {
	Name      string
	CPU       int64 // milli-cores
	MemoryMiB int64
	NumGPU    int
	GPUMilli  int // per GPU
	// Spec lists the allowed GPU models (empty: any).
	Spec []string
}

// TotalMilli is the pod's GPU demand: num_gpu x gpu_milli.
func (p Pod) TotalMilli() int64 { return int64(p.NumGPU) * int64(p.GPUMilli) }

// Data is where traces are read from: the files embedded in the binary, or
// a directory with the same file names.
type Data struct{ fsys fs.FS }

// Embedded returns the traces shipped with gpushare (see data/README.md).
func Embedded() Data { sub, _ := fs.Sub(embedded, "data"); return Data{sub} }

// Dir reads traces from a directory (for example /work/shared/data/openb).
func Dir(path string) Data { return Data{os.DirFS(path)} }

// Nodes reads the GPU-node list.
func (d Data) Nodes() ([]Node, error) {
	f, err := d.fsys.Open("openb_node_list_gpu_node.csv")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadNodes(f)
}

// Pods reads the pod list of a trace ("default", "gpushare40", ...).
func (d Data) Pods(trace string) ([]Pod, error) {
	f, err := d.fsys.Open("openb_pod_list_" + trace + ".csv")
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w (known traces: %s)", trace, err, strings.Join(Traces, ", "))
	}
	defer f.Close()
	return ReadPods(f)
}

// Published reads the FGD authors' published allocation ratios.
func (d Data) Published() (Published, error) {
	f, err := d.fsys.Open("fgd_published_alloc_ratio.csv")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadPublished(f)
}

// PublishedFrag reads the FGD authors' published fragmentation ratios.
func (d Data) PublishedFrag() (Published, error) {
	f, err := d.fsys.Open("fgd_published_frag_ratio.csv")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadPublished(f)
}

// ErrFormat is wrapped by every parse error.
var ErrFormat = errors.New("malformed openb file")

// table reads a CSV with a header into maps by column name.
func table(r io.Reader, need ...string) ([]map[string]string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	rows, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: empty file", ErrFormat)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[strings.TrimSpace(h)] = i
	}
	for _, n := range need {
		if _, ok := col[n]; !ok {
			return nil, fmt.Errorf("%w: no column %q (header %v)", ErrFormat, n, rows[0])
		}
	}
	out := make([]map[string]string, 0, len(rows)-1)
	for li, row := range rows[1:] {
		if len(row) < len(need) {
			return nil, fmt.Errorf("%w: line %d has %d fields", ErrFormat, li+2, len(row))
		}
		m := make(map[string]string, len(col))
		for name, i := range col {
			if i < len(row) {
				m[name] = strings.TrimSpace(row[i])
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func num(m map[string]string, key string, line int) (int64, error) {
	v, err := strconv.ParseInt(m[key], 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: line %d: %s %q is not a non-negative integer", ErrFormat, line, key, m[key])
	}
	return v, nil
}

// ReadNodes parses a node list: sn, cpu_milli, memory_mib, gpu, model.
func ReadNodes(r io.Reader) ([]Node, error) {
	rows, err := table(r, "sn", "cpu_milli", "memory_mib", "gpu", "model")
	if err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(rows))
	for i, m := range rows {
		n := Node{Name: m["sn"], Model: m["model"]}
		var g int64
		if n.CPU, err = num(m, "cpu_milli", i+2); err == nil {
			if n.MemoryMiB, err = num(m, "memory_mib", i+2); err == nil {
				g, err = num(m, "gpu", i+2)
			}
		}
		if err != nil {
			return nil, err
		}
		n.GPUs = int(g)
		if n.Name == "" || (n.GPUs > 0 && n.Model == "") {
			return nil, fmt.Errorf("%w: line %d: node needs a name, and a model when it has GPUs", ErrFormat, i+2)
		}
		out = append(out, n)
	}
	return out, nil
}

// ReadPods parses a pod list: name, cpu_milli, memory_mib, num_gpu,
// gpu_milli and an optional gpu_spec; other columns are ignored (creation
// and deletion times are not used by the FGD method).
func ReadPods(r io.Reader) ([]Pod, error) {
	rows, err := table(r, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	out := make([]Pod, 0, len(rows))
	for i, m := range rows {
		p := Pod{Name: m["name"]}
		var k, g int64
		if p.CPU, err = num(m, "cpu_milli", i+2); err == nil {
			if p.MemoryMiB, err = num(m, "memory_mib", i+2); err == nil {
				if k, err = num(m, "num_gpu", i+2); err == nil {
					g, err = num(m, "gpu_milli", i+2)
				}
			}
		}
		if err != nil {
			return nil, err
		}
		p.NumGPU, p.GPUMilli = int(k), int(g)
		if s := m["gpu_spec"]; s != "" {
			p.Spec = strings.Split(s, "|")
		}
		switch {
		case p.Name == "":
			return nil, fmt.Errorf("%w: line %d: pod has no name", ErrFormat, i+2)
		case p.GPUMilli > 1000 || (p.NumGPU == 0) != (p.GPUMilli == 0):
			return nil, fmt.Errorf("%w: line %d: pod %s: num_gpu %d with gpu_milli %d", ErrFormat, i+2, p.Name, p.NumGPU, p.GPUMilli)
		case p.GPUMilli%(1000/SharesPerGPU) != 0:
			return nil, fmt.Errorf("%w: line %d: pod %s: gpu_milli %d is not a multiple of %d", ErrFormat, i+2, p.Name, p.GPUMilli, 1000/SharesPerGPU)
		case p.NumGPU > 1 && p.GPUMilli != 1000:
			return nil, fmt.Errorf("%w: line %d: pod %s: %d GPUs of %d milli each (multi-GPU pods take whole GPUs)", ErrFormat, i+2, p.Name, p.NumGPU, p.GPUMilli)
		}
		out = append(out, p)
	}
	return out, nil
}
