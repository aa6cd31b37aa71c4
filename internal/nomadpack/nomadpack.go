package nomadpack

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"text/template"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// Pack is a pack read from its directory.
type Pack struct {
	// Dir is the pack's directory.
	Dir string
	// Name, Description and Version are metadata.hcl's pack block; URL is
	// its app block's url.
	Name, Description, Version, URL string
	// Variables are variables.hcl's variable blocks, in file order.
	Variables []*Variable
	// templates are the templates/*.tpl files by pack-relative path.
	templates map[string]string
	// output is outputs.tpl ("" when the pack has none).
	output string
}

// Variable is a variable block of variables.hcl.
type Variable struct {
	Name        string
	Description string
	Type        cty.Type
	Default     cty.Value
}

// Rendered is what a pack renders to, by pack-relative template path
// (templates/x.nomad.tpl).
type Rendered struct {
	// Jobs are the rendered templates/*.nomad.tpl.
	Jobs map[string]string
	// Aux are the other rendered templates (not helpers).
	Aux map[string]string
	// Output is outputs.tpl rendered.
	Output string
}

type metadataFile struct {
	App *struct {
		URL string `hcl:"url"`
	} `hcl:"app,block"`
	Pack *struct {
		Name        string `hcl:"name"`
		Description string `hcl:"description,optional"`
		Version     string `hcl:"version"`
	} `hcl:"pack,block"`
	Remain hcl.Body `hcl:",remain"`
}

// Load reads the pack in dir.
func Load(dir string) (*Pack, error) {
	p := &Pack{Dir: dir, templates: map[string]string{}}
	src, err := os.ReadFile(filepath.Join(dir, "metadata.hcl"))
	if err != nil {
		return nil, err
	}
	f, diags := hclsyntax.ParseConfig(src, "metadata.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	var md metadataFile
	if diags := gohcl.DecodeBody(f.Body, nil, &md); diags.HasErrors() {
		return nil, diags
	}
	if md.App == nil || md.Pack == nil {
		return nil, errors.New("metadata.hcl: an app and a pack block are required")
	}
	p.Name, p.Description, p.Version, p.URL = md.Pack.Name, md.Pack.Description, md.Pack.Version, md.App.URL

	if p.Variables, err = loadVariables(filepath.Join(dir, "variables.hcl")); err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, "outputs.tpl")); err == nil {
		p.output = string(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	tpls, err := filepath.Glob(filepath.Join(dir, "templates", "*.tpl"))
	if err != nil {
		return nil, err
	}
	for _, t := range tpls {
		b, err := os.ReadFile(t)
		if err != nil {
			return nil, err
		}
		p.templates["templates/"+filepath.Base(t)] = string(b)
	}
	return p, nil
}

func loadVariables(path string) ([]*Variable, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, diags := hclsyntax.ParseConfig(src, filepath.Base(path), hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	content, diags := f.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "variable", LabelNames: []string{"name"}}}})
	if diags.HasErrors() {
		return nil, diags
	}
	var vars []*Variable
	seen := map[string]bool{}
	for _, b := range content.Blocks {
		v := &Variable{Name: b.Labels[0], Type: cty.DynamicPseudoType, Default: cty.NullVal(cty.DynamicPseudoType)}
		if seen[v.Name] {
			return nil, fmt.Errorf("%s: variable %q declared twice", b.DefRange, v.Name)
		}
		seen[v.Name] = true
		attrs, diags := b.Body.JustAttributes()
		if diags.HasErrors() {
			return nil, diags
		}
		for name, a := range attrs {
			switch name {
			case "description":
				if diags := gohcl.DecodeExpression(a.Expr, nil, &v.Description); diags.HasErrors() {
					return nil, diags
				}
			case "type":
				if v.Type, diags = typeexpr.TypeConstraint(a.Expr); diags.HasErrors() {
					return nil, diags
				}
			case "default":
			default:
				return nil, fmt.Errorf("%s: variable %q: unknown argument %q", a.NameRange, v.Name, name)
			}
		}
		if a, ok := attrs["default"]; ok {
			val, diags := a.Expr.Value(nil)
			if diags.HasErrors() {
				return nil, diags
			}
			if v.Default, err = convert.Convert(val, v.Type); err != nil {
				return nil, fmt.Errorf("%s: variable %q: default: %v", a.NameRange, v.Name, err)
			}
		}
		vars = append(vars, v)
	}
	return vars, nil
}

// Values are the variables' values for a variables file's content (""
// for the defaults), as templates see them.
func (p *Pack) Values(varFile string) (map[string]any, error) {
	vals := map[string]cty.Value{}
	types := map[string]cty.Type{}
	for _, v := range p.Variables {
		vals[v.Name], types[v.Name] = v.Default, v.Type
	}
	if strings.TrimSpace(varFile) != "" {
		f, diags := hclsyntax.ParseConfig([]byte(varFile), "overrides.hcl", hcl.InitialPos)
		if diags.HasErrors() {
			return nil, diags
		}
		attrs, diags := f.Body.JustAttributes()
		if diags.HasErrors() {
			return nil, diags
		}
		for name, a := range attrs {
			t, ok := types[name]
			if !ok {
				return nil, fmt.Errorf("%s: %q is not a variable of the pack %s", a.NameRange, name, p.Name)
			}
			val, diags := a.Expr.Value(nil)
			if diags.HasErrors() {
				return nil, diags
			}
			if vals[name], diags = convertValue(val, t, a); diags.HasErrors() {
				return nil, diags
			}
		}
	}
	out := map[string]any{}
	for name, val := range vals {
		g, err := toGo(val)
		if err != nil {
			return nil, fmt.Errorf("variable %q: %v", name, err)
		}
		out[name] = g
	}
	return out, nil
}

func convertValue(val cty.Value, t cty.Type, a *hcl.Attribute) (cty.Value, hcl.Diagnostics) {
	c, err := convert.Convert(val, t)
	if err != nil {
		return cty.NilVal, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: fmt.Sprintf("variable %q: %v", a.Name, err), Subject: &a.Range}}
	}
	return c, nil
}

// toGo is a cty value as nomad-pack hands it to templates.
func toGo(val cty.Value) (any, error) {
	if val.IsNull() {
		return nil, nil
	}
	if !val.IsKnown() {
		return nil, errors.New("value is not known")
	}
	t := val.Type()
	switch {
	case t == cty.String:
		return val.AsString(), nil
	case t == cty.Bool:
		return val.True(), nil
	case t == cty.Number:
		bf := val.AsBigFloat()
		if bf.IsInf() {
			f, _ := bf.Float64()
			return f, nil
		}
		if i, acc := bf.Int64(); acc == big.Exact {
			if int64(int(i)) == i {
				return int(i), nil
			}
			return i, nil
		}
		f, _ := bf.Float64()
		return f, nil
	case t.IsListType() || t.IsSetType() || t.IsTupleType():
		var list []any
		maps := val.LengthInt() > 0
		for it := val.ElementIterator(); it.Next(); {
			_, ev := it.Element()
			g, err := toGo(ev)
			if err != nil {
				return nil, err
			}
			if _, ok := g.(map[string]any); !ok {
				maps = false
			}
			list = append(list, g)
		}
		if maps && (t.IsTupleType() || t.ElementType().IsMapType() || t.ElementType().IsObjectType()) {
			// a collection of maps or objects is []map[string]any
			out := make([]map[string]any, len(list))
			for i, g := range list {
				out[i] = g.(map[string]any)
			}
			return out, nil
		}
		if list == nil {
			list = []any{}
		}
		return list, nil
	case t.IsMapType() || t.IsObjectType():
		out := map[string]any{}
		for it := val.ElementIterator(); it.Next(); {
			k, ev := it.Element()
			g, err := toGo(ev)
			if err != nil {
				return nil, err
			}
			out[k.AsString()] = g
		}
		return out, nil
	}
	return nil, fmt.Errorf("cannot convert %s", t.FriendlyName())
}

// context is the template context (the dot): the pack's variables and
// metadata, which var and meta read.
type context struct {
	vars map[string]any
	meta map[string]any
}

// Render renders the pack with a variables file's content ("" for the
// defaults).
func (p *Pack) Render(varFile string) (*Rendered, error) {
	vals, err := p.Values(varFile)
	if err != nil {
		return nil, err
	}
	ctx := &context{vars: vals, meta: map[string]any{
		"app":          map[string]any{"url": p.URL},
		"pack":         map[string]any{"name": p.Name, "description": p.Description, "version": p.Version, "path": p.Dir},
		"dependencies": []map[string]any{},
	}}
	set := template.New("pack").Funcs(Funcs()).Delims("[[", "]]").Option("missingkey=zero")
	names := make([]string, 0, len(p.templates))
	for name := range p.templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := set.New(name).Parse(p.templates[name]); err != nil {
			return nil, err
		}
	}
	r := &Rendered{Jobs: map[string]string{}, Aux: map[string]string{}}
	exec := func(name string) (string, error) {
		var b strings.Builder
		if err := set.ExecuteTemplate(&b, name, ctx); err != nil {
			return "", fmt.Errorf("failed to render %s: %w", name, err)
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}
	for _, name := range names {
		if strings.HasPrefix(name, "templates/_") {
			continue
		}
		out, err := exec(name)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(out) == "" {
			continue
		}
		if strings.HasSuffix(name, ".nomad.tpl") {
			r.Jobs[name] = out
		} else {
			r.Aux[name] = out
		}
	}
	if p.output != "" {
		if _, err := set.New("outputs.tpl").Parse(p.output); err != nil {
			return nil, err
		}
		if r.Output, err = exec("outputs.tpl"); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Funcs are the template functions: nomad-pack's context functions and
// toStringList, and the Sprig functions the pack uses.
func Funcs() template.FuncMap {
	return template.FuncMap{
		"var":          func(k string, c *context) any { v, _ := lookup(k, c.vars); return v },
		"must_var":     func(k string, c *context) (any, error) { return lookup(k, c.vars) },
		"vars":         func(c *context) map[string]any { return c.vars },
		"meta":         func(k string, c *context) any { v, _ := lookup(k, c.meta); return v },
		"must_meta":    func(k string, c *context) (any, error) { return lookup(k, c.meta) },
		"metas":        func(c *context) map[string]any { return c.meta },
		"toStringList": toStringList,
		"quote":        quote,
		"coalesce":     coalesce,
		"replace":      func(old, new, src string) string { return strings.ReplaceAll(src, old, new) },
		"trimSuffix":   func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"indent":       indent,
		"nindent":      func(spaces int, v string) string { return "\n" + indent(spaces, v) },
	}
}

// lookup follows a dotted key through nested maps; a key that is not
// there is an error (var and meta render it as "").
func lookup(key string, m map[string]any) (any, error) {
	var cur any = m
	for _, k := range strings.Split(key, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return "", fmt.Errorf("key %s: not a map at %q", key, k)
		}
		if cur, ok = mm[k]; !ok {
			return "", fmt.Errorf("key %s not found", key)
		}
	}
	return cur, nil
}

// toStringList is nomad-pack's: a list as an HCL list of quoted strings.
func toStringList(l any) (string, error) {
	var b strings.Builder
	b.WriteByte('[')
	if list, ok := l.([]any); ok {
		for i, v := range list {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", v)
		}
	} else {
		fmt.Fprintf(&b, "%q", l)
	}
	b.WriteByte(']')
	return b.String(), nil
}

// quote is Sprig's: each non-nil argument as a Go-quoted string.
func quote(args ...any) string {
	var out []string
	for _, a := range args {
		if a != nil {
			out = append(out, fmt.Sprintf("%q", strval(a)))
		}
	}
	return strings.Join(out, " ")
}

func strval(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case error:
		return v.Error()
	case fmt.Stringer:
		return v.String()
	default:
		return fmt.Sprintf("%v", v)
	}
}

// coalesce is Sprig's: the first argument that is not empty.
func coalesce(args ...any) any {
	for _, a := range args {
		if !empty(a) {
			return a
		}
	}
	return nil
}

// empty is Sprig's: nil, a zero number, false, "" or an empty collection.
func empty(v any) bool {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return true
	}
	switch rv.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return rv.Len() == 0
	case reflect.Bool:
		return !rv.Bool()
	case reflect.Complex64, reflect.Complex128:
		return rv.Complex() == 0
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rv.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return rv.Float() == 0
	case reflect.Struct:
		return false
	default:
		return rv.IsNil()
	}
}

// indent is Sprig's: every line of v after spaces spaces.
func indent(spaces int, v string) string {
	pad := strings.Repeat(" ", spaces)
	return pad + strings.ReplaceAll(v, "\n", "\n"+pad)
}
