package plugin

import "github.com/gpushare/gpushare/internal/nomadplugin/hclspec"

// nomadRefSpec is the plugin's schema as it was when testdata/nomad-config
// was made with Nomad 1.11.3's own code (hclspecutils.Convert,
// hclutils.ParseHclInterface, cty msgpack): frozen here so that our
// encoder is still compared with Nomad's bytes (TestConfigAsNomadSendsIt)
// after the schema grew (the mps block's daemons, control, daemon_dir and
// gc_after; mig_instances). The module that made them can no longer be
// linked (BSL).
var nomadRefSpec = hclspec.NewObject(map[string]*hclspec.Spec{
	"enabled": hclspec.NewDefault(
		hclspec.NewAttr("enabled", "bool", false),
		hclspec.NewLiteral("true"),
	),
	"shares_per_gpu": hclspec.NewDefault(
		hclspec.NewAttr("shares_per_gpu", "number", false),
		hclspec.NewLiteral("100"),
	),
	"sharing": hclspec.NewDefault(
		hclspec.NewAttr("sharing", "string", false),
		hclspec.NewLiteral(`"mps"`),
	),
	"mps": hclspec.NewDefault(
		hclspec.NewBlock("mps", false, hclspec.NewObject(map[string]*hclspec.Spec{
			"pipe_directory": hclspec.NewDefault(
				hclspec.NewAttr("pipe_directory", "string", false),
				hclspec.NewLiteral(`"/tmp/nvidia-mps"`),
			),
			"log_directory": hclspec.NewDefault(
				hclspec.NewAttr("log_directory", "string", false),
				hclspec.NewLiteral(`"/var/log/nvidia-mps"`),
			),
		})),
		hclspec.NewLiteral(`{ pipe_directory = "/tmp/nvidia-mps", log_directory = "/var/log/nvidia-mps" }`),
	),
	"interposer": hclspec.NewDefault(
		hclspec.NewBlock("interposer", false, hclspec.NewObject(map[string]*hclspec.Spec{
			"enabled": hclspec.NewDefault(
				hclspec.NewAttr("enabled", "bool", false),
				hclspec.NewLiteral("false"),
			),
			"library": hclspec.NewDefault(
				hclspec.NewAttr("library", "string", false),
				hclspec.NewLiteral(`"`+DefaultInterposerLibrary+`"`),
			),
			"state_dir": hclspec.NewDefault(
				hclspec.NewAttr("state_dir", "string", false),
				hclspec.NewLiteral(`"`+DefaultInterposerStateDir+`"`),
			),
			"gc_after": hclspec.NewDefault(
				hclspec.NewAttr("gc_after", "string", false),
				hclspec.NewLiteral(`"168h"`),
			),
			"unified_memory": hclspec.NewDefault(
				hclspec.NewAttr("unified_memory", "bool", false),
				hclspec.NewLiteral("false"),
			),
			"unified_oversubscription_pct": hclspec.NewDefault(
				hclspec.NewAttr("unified_oversubscription_pct", "number", false),
				hclspec.NewLiteral("100"),
			),
		})),
		hclspec.NewLiteral(`{ enabled = false, library = "`+DefaultInterposerLibrary+`", state_dir = "`+DefaultInterposerStateDir+`", gc_after = "168h", unified_memory = false, unified_oversubscription_pct = 100 }`),
	),
	"fixture": hclspec.NewDefault(
		hclspec.NewAttr("fixture", "string", false),
		hclspec.NewLiteral(`""`),
	),
	"ignored_gpu_ids": hclspec.NewDefault(
		hclspec.NewAttr("ignored_gpu_ids", "list(string)", false),
		hclspec.NewLiteral("[]"),
	),
	"fingerprint_period": hclspec.NewDefault(
		hclspec.NewAttr("fingerprint_period", "string", false),
		hclspec.NewLiteral(`"1m"`),
	),
})
