package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"text/template"
)

// formatFlags are the -json and -t flags of Nomad's read commands: the
// data a command shows, as JSON or through a Go template, instead of text.
type formatFlags struct {
	json bool
	tmpl string
}

// addFormatFlags declares -json and -t on fs; what names the data.
func addFormatFlags(fs *flag.FlagSet, what string) *formatFlags {
	f := &formatFlags{}
	fs.BoolVar(&f.json, "json", false, "print "+what+" as JSON")
	fs.StringVar(&f.tmpl, "t", "", "format "+what+" with this Go template (text/template), as Nomad's -t")
	return f
}

// set reports whether the output is formatted.
func (f *formatFlags) set() bool { return f.json || f.tmpl != "" }

// check refuses -json with -t, as Nomad does ("Both json and template
// formatting are not allowed"), and a template that does not parse; ok is
// false when the command must return code now.
func (f *formatFlags) check(io IO, cmd string) (code int, ok bool) {
	if f.json && f.tmpl != "" {
		fmt.Fprintf(io.Err, "%s: both json and template formatting are not allowed: give -json or -t\n", cmd)
		return exitUsage, false
	}
	if f.tmpl != "" {
		if _, err := template.New("t").Parse(f.tmpl); err != nil {
			fmt.Fprintf(io.Err, "%s: -t: %v\n", cmd, err)
			return exitUsage, false
		}
	}
	return 0, true
}

// write prints data as -json or -t say; 0, or 1 when it cannot.
func (f *formatFlags) write(io IO, cmd string, data any) int {
	var b bytes.Buffer
	if f.json {
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "    ") // as Nomad's -json
		if err := enc.Encode(data); err != nil {
			fmt.Fprintf(io.Err, "%s: %v\n", cmd, err)
			return 1
		}
	} else {
		t, err := template.New("t").Parse(f.tmpl)
		if err == nil {
			err = t.Execute(&b, data)
		}
		if err != nil {
			fmt.Fprintf(io.Err, "%s: -t: %v\n", cmd, err)
			return 1
		}
	}
	_, _ = io.Out.Write(b.Bytes())
	return 0
}
