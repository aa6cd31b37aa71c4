package cli

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/gpushare/gpushare/internal/memlimit"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/go-hclog"
)

// testPinDelayEnv makes the scheduler wait between a decision and its
// pin, so that e2e tests can edit a job in between. Not for production.
const testPinDelayEnv = "GPUSHARE_TEST_PIN_DELAY"

func runScheduler(args []string, io IO) int {
	fs := newFlags("scheduler", "scheduler [-config FILE] [-nomad-address URL] [-http-address ADDR]", io)
	file := fs.String("config", "", "HCL configuration file (see README: nomad, policy, virtual_cluster, profile, leader)")
	addr := fs.String("nomad-address", "", "Nomad HTTP address; overrides the file")
	httpAddr := fs.String("http-address", "", "address of the HTTP API and /metrics; overrides the file")
	check := fs.Bool("check", false, "validate the configuration and exit")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	cfg := config.Default()
	if *file != "" {
		c, err := config.Load(*file)
		if err != nil {
			fmt.Fprintf(io.Err, "gpushare scheduler: %v\n", err)
			return 1
		}
		cfg = c
	} else if env := os.Getenv("NOMAD_ADDR"); env != "" {
		cfg.Nomad.Address = env
	}
	if *addr != "" {
		cfg.Nomad.Address = *addr
	}
	if *httpAddr != "" {
		cfg.HTTPAddress = *httpAddr
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(io.Err, "gpushare scheduler: %v\n", err)
		return 1
	}
	if *check {
		fmt.Fprintln(io.Out, "configuration is valid")
		return 0
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "gpushare", Level: hclog.LevelFromString(cfg.LogLevel), JSONFormat: cfg.LogJSON, Output: io.Err})
	applyMemoryLimit(cfg.MemoryLimit, logger, os.DirFS("/"))
	svc, err := service.New(cfg, logger)
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare scheduler: %v\n", err)
		return 1
	}
	if v := os.Getenv(testPinDelayEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(io.Err, "gpushare scheduler: %s = %q: not a duration\n", testPinDelayEnv, v)
			return 1
		}
		logger.Warn("test hook: waiting between each decision and its pin", "env", testPinDelayEnv, "delay", d)
		svc.SetPinDelay(d)
	}
	bound, err := svc.Listen()
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare scheduler: %v\n", err)
		return 1
	}
	fmt.Fprintf(io.Err, "gpushare scheduler: serving http on %s\n", bound)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := svc.Run(ctx); err != nil {
		fmt.Fprintf(io.Err, "gpushare scheduler: %v\n", err)
		return 1
	}
	return 0
}

// applyMemoryLimit gives the Go runtime the soft memory limit the
// configuration, GOMEMLIMIT or the cgroup sets (memlimit.Choose), and
// logs it and where it came from. fsys is the root file system.
func applyMemoryLimit(configured string, logger hclog.Logger, fsys fs.FS) int64 {
	l, err := memlimit.Choose(configured, os.Getenv, fsys)
	if err != nil { // Validate said so already
		logger.Error("memory limit not set", "error", err)
		return debug.SetMemoryLimit(-1)
	}
	got := memlimit.Apply(l)
	if l.Bytes > 0 {
		logger.Info("memory limit", "limit", l.String(), "bytes", got)
	} else {
		logger.Info("memory limit", "limit", l.String())
	}
	return got
}
