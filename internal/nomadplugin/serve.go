package nomadplugin

import (
	"fmt"
	"os"

	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/hashicorp/go-hclog"
)

// PluginFactory returns the plugin to serve.
type PluginFactory func(logger hclog.Logger) any

// Serve serves the plugin f returns to the Nomad client that started this
// process, with a JSON logger that Nomad's client reads back into its own
// log. A plugin that is not a device.DevicePlugin is refused.
func Serve(f PluginFactory) {
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, JSONFormat: true})
	switch p := f(logger).(type) {
	case device.DevicePlugin:
		device.Serve(p, logger)
	default:
		fmt.Fprintf(os.Stderr, "nomadplugin: cannot serve a %T: only device plugins are supported\n", p)
		os.Exit(1)
	}
}
