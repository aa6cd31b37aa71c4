package gavel

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// ConvertThroughputs turns Gavel's measured throughputs (its
// scheduler/simulation_throughputs.json, or a file its profiler wrote in
// the same form) of GPU type gpu into the two files ThroughputsOf reads:
// isolated_throughputs_<gpu>.csv and colocation_pairs_<gpu>.csv. Every
// shipped file was made by this conversion (data/README.md); with
// throughputs measured on another GPU type (an A100, an H100), written
// with its other files into a directory, `gpushare sim gavel -data DIR
// -gpu TYPE` runs the traces at that type's throughputs.
//
// The rows are in the file's order, the type's entries first, then
// "<gpu>_unconsolidated" (jobs spread across servers): each job's
// throughput alone as the file has it, and each pair's throughputs (alone
// and together) rounded to 5 decimals with the normalised ones (together
// / alone) to 4; a partner the type has no entry for is skipped, and a
// job measured at 0 alone has normalised throughputs of 0. Lines end in
// CRLF, as Python's csv module writes them.
func ConvertThroughputs(r io.Reader, gpu string) (isolated, pairs []byte, err error) {
	if gpu == "" || strings.ContainsAny(gpu, `/\ `) {
		return nil, nil, fmt.Errorf("%w: GPU type %q: want a name such as a100", ErrFormat, gpu)
	}
	top, err := orderedObject(json.NewDecoder(r))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	var iso, col bytes.Buffer
	wi, wc := csv.NewWriter(&iso), csv.NewWriter(&col)
	wi.UseCRLF, wc.UseCRLF = true, true
	_ = wi.Write([]string{"gpu_type", "job_type", "scale_factor", "throughput_steps_per_s"})
	_ = wc.Write([]string{"gpu_type", "job_a", "scale_a", "job_b", "scale_b", "iso_thr_a", "iso_thr_b", "coloc_thr_a", "coloc_thr_b", "norm_a", "norm_b"})
	found := false
	for _, wt := range []string{gpu, gpu + "_unconsolidated"} {
		raw, ok := top.get(wt)
		if !ok {
			continue
		}
		found = true
		jobs, err := orderedObject(json.NewDecoder(bytes.NewReader(raw)))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrFormat, wt, err)
		}
		alone := map[string]float64{}
		for _, j := range jobs {
			name, scale, err := gavelJobKey(j.key)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: %s: %v", ErrFormat, wt, err)
			}
			v, err := aloneOf(j.val)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: %s %s: %v", ErrFormat, wt, j.key, err)
			}
			alone[j.key] = v
			_ = wi.Write([]string{wt, name, scale, pyRepr(v)})
		}
		for _, j := range jobs {
			name, scale, _ := gavelJobKey(j.key)
			partners, _ := orderedObject(json.NewDecoder(bytes.NewReader(j.val)))
			ia := alone[j.key]
			for _, p := range partners {
				ib, ok := alone[p.key]
				if p.key == "null" || !ok {
					continue
				}
				var both []float64
				if err := json.Unmarshal(p.val, &both); err != nil || len(both) != 2 {
					return nil, nil, fmt.Errorf("%w: %s %s with %s: want [together a, together b]: %v", ErrFormat, wt, j.key, p.key, err)
				}
				pname, pscale, err := gavelJobKey(p.key)
				if err != nil {
					return nil, nil, fmt.Errorf("%w: %s %s: %v", ErrFormat, wt, j.key, err)
				}
				_ = wc.Write([]string{wt, name, scale, pname, pscale,
					pyRound(ia, 5), pyRound(ib, 5), pyRound(both[0], 5), pyRound(both[1], 5),
					normOf(both[0], ia), normOf(both[1], ib)})
			}
		}
	}
	if !found {
		return nil, nil, fmt.Errorf("%w: no entry %q (nor %q) in the throughputs", ErrFormat, gpu, gpu+"_unconsolidated")
	}
	wi.Flush()
	wc.Flush()
	return iso.Bytes(), col.Bytes(), errors.Join(wi.Error(), wc.Error())
}

// entry is one member of a JSON object, in the file's order.
type entry struct {
	key string
	val json.RawMessage
}

type object []entry

func (o object) get(key string) (json.RawMessage, bool) {
	for _, e := range o {
		if e.key == key {
			return e.val, true
		}
	}
	return nil, false
}

// orderedObject reads a JSON object keeping its members' order (Gavel's
// files are in the order the simulator's rows are).
func orderedObject(d *json.Decoder) (object, error) {
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("want a JSON object (%v)", err)
	}
	var out object
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil, err
		}
		var e entry
		e.key, _ = t.(string)
		if err := d.Decode(&e.val); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	_, err := d.Token()
	return out, err
}

// gavelJobKey splits Gavel's key of a job, a Python tuple such as
// "('ResNet-18 (batch size 16)', 1)", into its type and scale factor.
func gavelJobKey(k string) (name, scale string, err error) {
	in, ok := strings.CutPrefix(k, "(")
	in, ok2 := strings.CutSuffix(in, ")")
	i := strings.LastIndex(in, ", ")
	if !ok || !ok2 || i < 2 {
		return "", "", fmt.Errorf("job %q: want ('<job type>', <scale factor>)", k)
	}
	name, scale = in[:i], in[i+2:]
	if q := name[0]; (q != '\'' && q != '"') || name[len(name)-1] != q {
		return "", "", fmt.Errorf("job %q: want a quoted job type", k)
	}
	if n, err := strconv.Atoi(scale); err != nil || n < 1 {
		return "", "", fmt.Errorf("job %q: scale factor %q is not a whole number of GPUs", k, scale)
	}
	return name[1 : len(name)-1], scale, nil
}

// aloneOf is a job's throughput alone: its "null" member.
func aloneOf(raw json.RawMessage) (float64, error) {
	partners, err := orderedObject(json.NewDecoder(bytes.NewReader(raw)))
	if err != nil {
		return 0, err
	}
	v, ok := partners.get("null")
	if !ok {
		return 0, errors.New(`no "null" member (its throughput alone)`)
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || f < 0 || math.IsInf(f, 0) {
		return 0, fmt.Errorf("throughput alone %s: want a number of steps per second", v)
	}
	return f, nil
}

// normOf is together / alone rounded to 4 decimals, 0 for a job measured
// at nothing alone.
func normOf(together, alone float64) string {
	if alone == 0 {
		return "0.0"
	}
	return pyRound(together/alone, 4)
}

// pyRound is Python's repr(round(x, n)): the decimal correctly rounded
// (ties to even on the exact binary value), as the shortest float.
func pyRound(x float64, n int) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', n, 64), 64)
	return pyRepr(r)
}

// pyRepr is Python's repr of a float: the shortest digits that read back
// the same, in positional notation with at least one decimal from 1e-4 to
// below 1e16, in exponent notation (two exponent digits at least)
// outside.
func pyRepr(x float64) string {
	if a := math.Abs(x); x == 0 || (a >= 1e-4 && a < 1e16) {
		s := strconv.FormatFloat(x, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	return strconv.FormatFloat(x, 'e', -1, 64) // 1e-05, 2.5e+16: as Python writes them
}

// CopyTraces writes the data's MSR traces into dir/msr_seed0, so that a
// directory of converted throughputs is a whole -data directory; a trace
// already there is left as it is. It returns how many it wrote.
func (d Data) CopyTraces(dir string) (int, error) {
	names, err := d.TraceNames()
	if err != nil {
		return 0, err
	}
	to := filepath.Join(dir, "msr_seed0")
	if err := os.MkdirAll(to, 0o755); err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		dst := filepath.Join(to, name+".trace")
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		b, err := fs.ReadFile(d.fsys, path.Join("msr_seed0", name+".trace"))
		if err != nil {
			return n, err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
