package gavel

import (
	"bufio"
	"embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/scheduler/interference"
)

//go:embed data/*.csv data/msr_seed0/*.trace
var embedded embed.FS

// ErrFormat is wrapped by every parse error.
var ErrFormat = errors.New("malformed gavel file")

// Job is one line of a Gavel trace.
type Job struct {
	ID      int
	Type    string  // job type, e.g. "ResNet-18 (batch size 64)"
	Steps   float64 // total_steps
	Arrival float64 // seconds
	Scale   int     // GPUs (scale_factor)
}

// Data is where the traces and throughputs are read from.
type Data struct{ fsys fs.FS }

// Embedded returns the data shipped with gpushare (see data/README.md).
func Embedded() Data { sub, _ := fs.Sub(embedded, "data"); return Data{sub} }

// Dir reads a directory laid out like /work/shared/data/gavel.
func Dir(p string) Data { return Data{os.DirFS(p)} }

// TraceNames lists the MSR traces (file names without .trace).
func (d Data) TraceNames() ([]string, error) {
	ents, err := fs.ReadDir(d.fsys, "msr_seed0")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".trace"); ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Trace reads one MSR trace by name.
func (d Data) Trace(name string) ([]Job, error) {
	f, err := d.fsys.Open(path.Join("msr_seed0", name+".trace"))
	if err != nil {
		names, _ := d.TraceNames()
		return nil, fmt.Errorf("trace %q: %w (known: %s)", name, err, strings.Join(names, ", "))
	}
	defer f.Close()
	return ReadTrace(f)
}

// DefaultGPU is the GPU type the simulated clusters run at unless told
// otherwise, and the one the interference model is fitted on
// (interference.Default).
const DefaultGPU = "v100"

// Throughputs reads the isolated and co-located throughputs of DefaultGPU.
func (d Data) Throughputs() (*Throughputs, error) { return d.ThroughputsOf(DefaultGPU) }

// ThroughputsOf reads the isolated and co-located throughputs Gavel
// measured on GPU type gpu (isolated_throughputs_<gpu>.csv and
// colocation_pairs_<gpu>.csv; see data/README.md).
func (d Data) ThroughputsOf(gpu string) (*Throughputs, error) {
	if gpu == "" {
		gpu = DefaultGPU
	}
	f, err := d.fsys.Open("isolated_throughputs_" + gpu + ".csv")
	if err != nil {
		known, _ := d.GPUs()
		return nil, fmt.Errorf("GPU type %q: no measured throughputs (known: %s): %w; measurements of another type in Gavel's form become a -data directory with 'gpushare sim gavel-throughputs'", gpu, strings.Join(known, ", "), err)
	}
	defer f.Close()
	g, err := d.fsys.Open("colocation_pairs_" + gpu + ".csv")
	if err != nil {
		return nil, fmt.Errorf("GPU type %q: %w", gpu, err)
	}
	defer g.Close()
	return ReadThroughputsOf(gpu, f, g)
}

// GPUs lists the GPU types the data has throughputs of, sorted.
func (d Data) GPUs() ([]string, error) {
	names, err := fs.Glob(d.fsys, "isolated_throughputs_*.csv")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(n, "isolated_throughputs_"), ".csv"))
	}
	slices.Sort(out)
	return out, nil
}

// ReadTrace parses a tab-separated trace: job_type, command, num_steps_arg,
// needs_data_dir, total_steps, arrival_time, scale_factor.
func ReadTrace(r io.Reader) ([]Job, error) {
	var out []Job
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 7 {
			return nil, fmt.Errorf("%w: line %d has %d tab-separated fields, want 7", ErrFormat, line, len(f))
		}
		steps, err1 := strconv.ParseFloat(f[4], 64)
		arr, err2 := strconv.ParseFloat(f[5], 64)
		scale, err3 := strconv.Atoi(f[6])
		if err := errors.Join(err1, err2, err3); err != nil || steps <= 0 || arr < 0 || scale < 1 {
			return nil, fmt.Errorf("%w: line %d: steps %q, arrival %q, scale %q", ErrFormat, line, f[4], f[5], f[6])
		}
		out = append(out, Job{ID: len(out), Type: f[0], Steps: steps, Arrival: arr, Scale: scale})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b Job) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
	return out, nil
}

type isoKey struct {
	typ          string
	scale        int
	consolidated bool
}

type pairKey struct {
	a, b string
}

// Throughputs are Gavel's measured numbers of one GPU type.
type Throughputs struct {
	gpu  string // the GPU type they were measured on
	iso  map[isoKey]float64
	pair map[pairKey][2]float64 // normalised throughputs of a and b (single-GPU jobs)
	// rows are the single-GPU pairs as measured, in file order: what the
	// interference model is fitted on (see heldout.go).
	rows []interference.Pair
}

func readCSV(r io.Reader, need ...string) ([]map[string]string, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: empty file", ErrFormat)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, n := range need {
		if _, ok := col[n]; !ok {
			return nil, fmt.Errorf("%w: no column %q", ErrFormat, n)
		}
	}
	out := make([]map[string]string, 0, len(rows)-1)
	for _, row := range rows[1:] {
		m := map[string]string{}
		for n, i := range col {
			if i < len(row) {
				m[n] = row[i]
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// ReadThroughputs parses isolated_throughputs_v100.csv and
// colocation_pairs_v100.csv (ReadThroughputsOf DefaultGPU).
func ReadThroughputs(isolated, pairs io.Reader) (*Throughputs, error) {
	return ReadThroughputsOf(DefaultGPU, isolated, pairs)
}

// ReadThroughputsOf parses the throughputs of GPU type gpu: rows of
// gpu_type gpu are jobs on one server, rows of gpu_type
// gpu_unconsolidated jobs spread across servers; other rows are skipped.
func ReadThroughputsOf(gpu string, isolated, pairs io.Reader) (*Throughputs, error) {
	t := &Throughputs{gpu: gpu, iso: map[isoKey]float64{}, pair: map[pairKey][2]float64{}}
	rows, err := readCSV(isolated, "gpu_type", "job_type", "scale_factor", "throughput_steps_per_s")
	if err != nil {
		return nil, err
	}
	for i, m := range rows {
		if m["gpu_type"] != gpu && m["gpu_type"] != gpu+"_unconsolidated" {
			continue
		}
		scale, err1 := strconv.Atoi(m["scale_factor"])
		thr, err2 := strconv.ParseFloat(m["throughput_steps_per_s"], 64)
		if err1 != nil || err2 != nil || scale < 1 || thr < 0 {
			return nil, fmt.Errorf("%w: isolated line %d: %v", ErrFormat, i+2, m)
		}
		if thr == 0 {
			continue // not measured (K80: ResNet-50 at batch 128 on 2 or more): Isolated scales the measured
		}
		t.iso[isoKey{m["job_type"], scale, m["gpu_type"] == gpu}] = thr
	}
	if len(t.iso) == 0 {
		return nil, fmt.Errorf("%w: no isolated throughput of GPU type %q", ErrFormat, gpu)
	}
	rows, err = readCSV(pairs, "gpu_type", "job_a", "scale_a", "job_b", "scale_b", "norm_a", "norm_b")
	if err != nil {
		return nil, err
	}
	for i, m := range rows {
		if m["gpu_type"] != gpu || m["scale_a"] != "1" || m["scale_b"] != "1" {
			continue
		}
		na, err1 := strconv.ParseFloat(m["norm_a"], 64)
		nb, err2 := strconv.ParseFloat(m["norm_b"], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: pairs line %d: %v", ErrFormat, i+2, m)
		}
		t.rows = append(t.rows, interference.Pair{A: m["job_a"], B: m["job_b"], NormA: na, NormB: nb})
		t.pair[pairKey{m["job_a"], m["job_b"]}] = [2]float64{na, nb}
		t.pair[pairKey{m["job_b"], m["job_a"]}] = [2]float64{nb, na}
	}
	return t, nil
}

// Isolated returns a job's throughput (steps/s) alone on scale GPUs, on one
// server or spread across servers. Scale factors Gavel did not measure
// (above 8, or not a power of two) scale the largest measured one below
// them linearly.
func (t *Throughputs) Isolated(typ string, scale int, consolidated bool) (float64, error) {
	if v, ok := t.iso[isoKey{typ, scale, consolidated}]; ok {
		return v, nil
	}
	if !consolidated {
		return t.Isolated(typ, scale, true)
	}
	for s := scale - 1; s >= 1; s-- {
		if v, ok := t.iso[isoKey{typ, s, true}]; ok {
			return v * float64(scale) / float64(s), nil
		}
	}
	return 0, fmt.Errorf("no measured throughput for job type %q", typ)
}

// Pair returns the normalised throughputs (co-located / alone) of two
// single-GPU jobs sharing a GPU; ok is false when they cannot share (Gavel
// measured 0, for example because they do not fit in memory together).
func (t *Throughputs) Pair(a, b string) (na, nb float64, ok bool) {
	v, found := t.pair[pairKey{a, b}]
	if !found || v[0] <= 0 || v[1] <= 0 {
		return 0, 0, false
	}
	return v[0], v[1], true
}

// gpuName is how a GPU type is named on the simulated nodes and in
// reports: "v100" is "V100".
func gpuName(gpu string) string {
	if gpu == "" {
		gpu = DefaultGPU
	}
	return strings.ToUpper(gpu)
}

// modelFittedOn says, in a report, that the interference model was fitted
// on another GPU type's pairs than the one the cluster ran at.
func modelFittedOn(gpu string) string {
	if gpu == "" || gpu == DefaultGPU {
		return ""
	}
	return "; gpushare's interference model fitted on " + gpuName(DefaultGPU) + " pairs only, never on " + gpuName(gpu) + "'s"
}
