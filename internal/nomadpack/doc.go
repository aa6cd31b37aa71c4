// Package nomadpack renders a nomad-pack pack (the registry layout:
// metadata.hcl, variables.hcl, outputs.tpl, templates/) the way nomad-pack
// v0.1 and later render it, for the tests of the pack the repository ships,
// deploy/pack/gpushare_scheduler. nomad-pack itself is not a Go module the
// repository can depend on (the module proxy does not serve it), so this is
// its renderer's contract, restated:
//
//   - variables.hcl declares variable blocks (type, default, description);
//     a variables file (nomad-pack's -f/--var-file) sets top-level
//     attributes, name = value, converted to the declared type; numbers
//     reach templates as int when whole, else float64, lists as []any,
//     objects and maps as map[string]any.
//   - Templates use [[ ]] delimiters and the current (v0.1+) syntax, which
//     the community registry uses: [[ var "name" . ]] and
//     [[ meta "pack.name" . ]] (not the original [[ .my.name ]]).
//   - Every templates/*.tpl file is parsed into one template set;
//     templates/_*.tpl are helpers (never rendered alone),
//     templates/*.nomad.tpl are jobs (nomad-pack run submits them), other
//     templates/*.tpl are auxiliary files (nomad-pack render writes them,
//     without .tpl). A missing key renders as zero ("<no value>" removed);
//     a template that renders to whitespace only is dropped.
//   - Functions: var, must_var, vars, meta, must_meta, metas, nomad-pack's
//     toStringList, and the few Sprig functions the pack uses (quote,
//     coalesce, replace, trimSuffix, indent, nindent), with Sprig's semantics. A
//     template that calls any other function fails to parse: add it here,
//     as Sprig defines it, when the pack needs it.
package nomadpack
