// Command nomad-device-gpushare is the gpushare Nomad device plugin. Nomad
// starts it from the client's plugin_dir; see the README for its config.
package main

import (
	"github.com/gpushare/gpushare/internal/nomadplugin"
	"github.com/gpushare/gpushare/plugin"
	"github.com/hashicorp/go-hclog"
)

func main() {
	nomadplugin.Serve(func(logger hclog.Logger) any { return plugin.New(logger, nil) })
}
