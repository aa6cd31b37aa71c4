package jobspecs

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// Lines says where the parts of a jobspec are in its HCL source, so that
// a finding names its line. Nomad parses the jobspec (Parser) and hands
// back a job without positions; Lines reads the source's syntax only
// (nothing is evaluated), so a part made by a dynamic block or a for
// expression is not found, and its finding names the enclosing block.
type Lines struct {
	job     int
	groups  map[string]int
	meta    map[string]map[string]int // "" (the job) or the group -> meta key -> line
	devices map[string]map[string]int // group -> device name -> line
}

// IndexLines reads src's syntax; a source HCL cannot read gives an index
// that finds nothing (Nomad's parser says what is wrong with it).
func IndexLines(filename string, src []byte) *Lines {
	l := &Lines{groups: map[string]int{}, meta: map[string]map[string]int{}, devices: map[string]map[string]int{}}
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() || f == nil {
		return l
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return l
	}
	for _, job := range body.Blocks {
		if job.Type != "job" {
			continue
		}
		l.job = job.DefRange().Start.Line
		l.readMeta("", job.Body)
		for _, g := range job.Body.Blocks {
			if g.Type != "group" || len(g.Labels) != 1 {
				continue
			}
			name := g.Labels[0]
			l.groups[name] = g.DefRange().Start.Line
			l.readMeta(name, g.Body)
			for _, t := range g.Body.Blocks {
				if t.Type != "task" {
					continue
				}
				for _, r := range t.Body.Blocks {
					if r.Type != "resources" {
						continue
					}
					for _, d := range r.Body.Blocks {
						if d.Type == "device" && len(d.Labels) == 1 {
							if l.devices[name] == nil {
								l.devices[name] = map[string]int{}
							}
							if _, seen := l.devices[name][d.Labels[0]]; !seen {
								l.devices[name][d.Labels[0]] = d.DefRange().Start.Line
							}
						}
					}
				}
			}
		}
		break // a jobspec has one job
	}
	return l
}

// readMeta notes the lines of the meta keys of a job or group body, as
// an attribute (meta = { "gpushare.class" = "production" }) or a block
// (meta { owner = "ml" }).
func (l *Lines) readMeta(scope string, body *hclsyntax.Body) {
	keys := map[string]int{}
	if a, ok := body.Attributes["meta"]; ok {
		if obj, ok := a.Expr.(*hclsyntax.ObjectConsExpr); ok {
			for _, item := range obj.Items {
				k, diags := item.KeyExpr.Value(nil)
				if diags.HasErrors() || !k.IsKnown() || k.IsNull() || k.Type() != cty.String {
					continue
				}
				keys[k.AsString()] = item.KeyExpr.Range().Start.Line
			}
		}
	}
	for _, b := range body.Blocks {
		if b.Type != "meta" {
			continue
		}
		for name, a := range b.Body.Attributes {
			keys[name] = a.SrcRange.Start.Line
		}
	}
	l.meta[scope] = keys
}

// Line is the line of the part of the jobspec f is about (0: not found):
// its meta key, else its device block, else its group, else the job.
func (l *Lines) Line(f Finding) int {
	if l == nil {
		return 0
	}
	if f.Meta != "" {
		if n, ok := l.meta[f.Group][f.Meta]; ok {
			return n
		}
		if n, ok := l.meta[""][f.Meta]; ok {
			return n
		}
	}
	if f.Device != "" {
		if n, ok := l.devices[f.Group][f.Device]; ok {
			return n
		}
	}
	if f.Group != "" {
		if n, ok := l.groups[f.Group]; ok {
			return n
		}
	}
	return l.job
}
