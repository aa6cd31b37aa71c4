// Command nomad-device-gpushare is the gpushare Nomad device plugin. Nomad
// starts it from the client's plugin_dir; see the README for its config.
package main

import (
	"github.com/gpushare/gpushare/plugin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins"
)

func main() {
	plugins.Serve(func(logger hclog.Logger) interface{} { return plugin.New(logger, nil) })
}
