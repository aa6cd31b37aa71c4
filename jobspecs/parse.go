package jobspecs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty"
)

// ErrNoParser is returned when neither a Nomad agent nor the nomad binary
// is there to parse a jobspec with.
var ErrNoParser = errors.New("no Nomad to parse the jobspec with: set NOMAD_ADDR (and NOMAD_TOKEN) to a reachable Nomad, or put the nomad binary on PATH")

// Parser parses HCL jobspecs with Nomad's own parser: gpushare links no
// jobspec parser (Nomad's is under the Business Source License), so it
// asks a Nomad agent (/v1/jobs/parse) or runs the nomad binary
// (`nomad job run -output`, which contacts no server).
type Parser struct {
	// Nomad is the agent to parse with first; nil skips it. An agent that
	// does not answer, or refuses the request, is skipped for the binary;
	// when the agent finds the jobspec wrong and the binary is there, the
	// binary's verdict counts (it reads the files the jobspec names).
	Nomad *api.Client
	// Binary is the nomad binary; "" looks for nomad on PATH.
	Binary string
	// Timeout bounds the nomad binary's run (default 1m).
	Timeout time.Duration
}

// DefaultParser asks the agent of NOMAD_ADDR (default
// http://127.0.0.1:4646, with NOMAD_TOKEN and the TLS variables), then the
// nomad binary on PATH.
func DefaultParser() Parser {
	c, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		return Parser{}
	}
	return Parser{Nomad: c}
}

// Parse reads an HCL jobspec the way `nomad job run` does (HCL2, with
// variables given as "name=value" strings) with DefaultParser.
func Parse(filename string, src []byte, vars []string) (*api.Job, error) {
	return DefaultParser().Parse(filename, src, vars)
}

// Parse parses the jobspec src, read from filename, with the variables
// vars ("name=value"). Errors name the file and, for HCL errors, the line.
func (p Parser) Parse(filename string, src []byte, vars []string) (*api.Job, error) {
	for _, kv := range vars {
		if k, _, ok := strings.Cut(kv, "="); !ok || !hclsyntax.ValidIdentifier(k) {
			return nil, fmt.Errorf("-var %q: want name=value, name a valid HCL identifier", kv)
		}
	}
	bin := p.Binary
	if bin == "" {
		bin = "nomad"
	}
	bin, binErr := exec.LookPath(bin)
	var tried []string
	if p.Nomad != nil {
		job, err := p.viaAgent(src, vars)
		var resp api.UnexpectedResponseError
		switch {
		case err == nil:
			return job, nil
		case errors.As(err, &resp) && resp.StatusCode() == 400 && binErr != nil:
			// the agent parsed the jobspec and found it wrong
			return nil, agentParseError(filename, resp)
		case errors.As(err, &resp) && resp.StatusCode() == 400:
			// the binary has the last word: unlike the agent, it reads
			// the files the jobspec names (file()), as `nomad job run` does
		default:
			tried = append(tried, fmt.Sprintf("Nomad at %s: %v", p.Nomad.Address(), err))
		}
	}
	if binErr != nil {
		tried = append(tried, fmt.Sprintf("nomad binary: %v", binErr))
		return nil, fmt.Errorf("%s: %w (%s)", filename, ErrNoParser, strings.Join(tried, "; "))
	}
	return p.viaBinary(bin, filename, src, vars)
}

// viaAgent parses with the agent's /v1/jobs/parse, not canonicalized, as
// `nomad job run` sends jobs. The agent reads no files (file() fails) and
// ignores variables the jobspec does not declare.
func (p Parser) viaAgent(src []byte, vars []string) (*api.Job, error) {
	content, err := varFile(vars)
	if err != nil {
		return nil, err
	}
	return p.Nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: content})
}

// varFile is -var flags as the content of a variables file: each value a
// string (which HCL converts to a number or bool where the variable wants
// one), or as written when it is a list or object.
func varFile(vars []string) (string, error) {
	var b strings.Builder
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		b.WriteString(k + " = ")
		if t := strings.TrimSpace(v); strings.HasPrefix(t, "[") || strings.HasPrefix(t, "{") {
			b.WriteString(t)
		} else {
			b.Write(hclwrite.TokensForValue(cty.StringVal(v)).Bytes())
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// agentParseError is the agent's parse error with the file's name where
// the agent says "input.hcl".
func agentParseError(filename string, resp api.UnexpectedResponseError) error {
	msg := strings.TrimSpace(resp.Body())
	msg = strings.TrimPrefix(msg, "Failed to parse job: ")
	msg = strings.ReplaceAll(msg, "input.hcl:", filename+":")
	if !strings.Contains(msg, filename+":") {
		msg = filename + ": " + msg
	}
	return errors.New(msg)
}

// viaBinary runs `nomad job run -output`, which prints the job as JSON
// without contacting a server. A file on disk is parsed in place (so
// file() reads relative to the working directory, as `nomad job run`
// does); other sources go through a temporary file of the same name.
func (p Parser) viaBinary(bin, filename string, src []byte, vars []string) (*api.Job, error) {
	path := filename
	if onDisk, err := os.ReadFile(filename); err != nil || !bytes.Equal(onDisk, src) {
		dir, err := os.MkdirTemp("", "gpushare-jobspec-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, filepath.Base(filename))
		if err := os.WriteFile(path, src, 0o600); err != nil {
			return nil, err
		}
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"job", "run", "-output"}
	for _, kv := range vars {
		args = append(args, "-var", kv)
	}
	cmd := exec.CommandContext(ctx, bin, append(args, path)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %s job run -output did not finish in %s", filename, bin, timeout)
		}
		if msg := binaryParseError(filename, path, stderr.String()); msg != "" {
			return nil, errors.New(msg)
		}
		return nil, fmt.Errorf("%s: %s job run -output: %w", filename, bin, err)
	}
	var out struct{ Job *api.Job }
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.Job == nil {
		return nil, fmt.Errorf("%s: %s job run -output printed no job (%v): is it Nomad 1.x?", filename, bin, err)
	}
	return out.Job, nil
}

// binaryParseError is the nomad binary's error output without its
// preamble, naming filename where it names the file it parsed.
func binaryParseError(filename, path, stderr string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		l = strings.TrimPrefix(l, "Error getting job struct: ")
		if strings.HasPrefix(l, "Error parsing job file from ") || strings.TrimSpace(l) == "" {
			continue
		}
		for _, name := range []string{"<nil>", path, filepath.Base(path)} {
			if rest, ok := strings.CutPrefix(l, name+":"); ok && name != filename {
				l = filename + ":" + rest
				break
			}
		}
		lines = append(lines, l)
	}
	msg := strings.Join(lines, "\n")
	if msg != "" && !strings.Contains(msg, filename) {
		msg = filename + ": " + msg
	}
	return msg
}
