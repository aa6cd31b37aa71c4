package cli

import (
	"context"
	"fmt"
	"golang.org/x/sys/unix"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/jobspecs"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

func runDemo(args []string, io IO) int {
	fs := newFlags("demo", "demo [-nomad PATH] [-plugin PATH] [-keep | -detach | -stop] [-state DIR] [-timeout D]", io)
	nomadBin := fs.String("nomad", "", "Nomad binary (default: $GPUSHARE_NOMAD; in a checkout bin/nomad or nomad on PATH if Nomad "+devcluster.NomadVersion+", else built into bin/nomad from the Go module proxy, saying so first; else nomad on PATH)")
	pluginBin := fs.String("plugin", "", "nomad-device-gpushare binary (default: the one beside gpushare; in a checkout, built)")
	keep := fs.Bool("keep", isTerminal(os.Stdin), "keep the cluster running until Ctrl-C (default when run from a terminal)")
	detach := fs.Bool("detach", false, "start the demo in the background, with no terminal, and return once the cluster is up; it runs until gpushare demo -stop (make demo-up / demo-down)")
	stopIt := fs.Bool("stop", false, "stop the demo -detach started")
	state := fs.String("state", defaultDemoState(), "where -detach keeps the demo's pid (demo.pid) and output (demo.log), and -stop finds them")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait for the example jobs to run (a busy machine may want more)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(io.Err, "gpushare demo: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	switch {
	case *detach && *stopIt:
		fmt.Fprintln(io.Err, "gpushare demo: -detach starts a demo, -stop stops one: give one of them")
		return exitUsage
	case *stopIt:
		if err := stopDetached(*state, 2*time.Minute, io); err != nil {
			fmt.Fprintf(io.Err, "gpushare demo: %v\n", err)
			return 1
		}
		return 0
	case *detach:
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(io.Err, "gpushare demo: %v\n", err)
			return 1
		}
		argv := []string{exe, "demo", "-keep", "-timeout", timeout.String()}
		if *nomadBin != "" {
			argv = append(argv, "-nomad", *nomadBin)
		}
		if *pluginBin != "" {
			argv = append(argv, "-plugin", *pluginBin)
		}
		if err := startDetached(*state, argv, io); err != nil {
			fmt.Fprintf(io.Err, "gpushare demo: %v\n", err)
			return 1
		}
		return 0
	}
	if err := demo(*nomadBin, *pluginBin, *keep, *timeout, io); err != nil {
		fmt.Fprintf(io.Err, "gpushare demo: %v\n", err)
		return 1
	}
	return 0
}

// isTerminal reports whether f is a terminal (not merely a character
// device: /dev/null is one, and `make demo < /dev/null` must return).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func demo(nomadBin, pluginBin string, keep bool, timeout time.Duration, io IO) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	say := func(format string, a ...any) { fmt.Fprintf(io.Out, "==> "+format+"\n", a...) }
	host := thisHost()
	// both found before anything starts: a missing one is said at once
	if nomadBin, err = host.nomad(nomadBin); err != nil {
		return err
	}
	if pluginBin, err = host.plugin(pluginBin); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gpushare-demo-")
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			os.RemoveAll(dir)
			return
		}
		// the error may point at the agents' logs: keep them
		fmt.Fprintf(io.Err, "gpushare demo: logs kept in %s (remove it when done)\n", dir)
	}()
	if nomadBin == "" { // in a checkout
		if nomadBin, err = checkoutNomad(ctx, host, demoCores(), goBuildNomad, 30*time.Second, say); err != nil {
			return err
		}
	}
	version, err := nomadVersion(nomadBin)
	if err != nil {
		return err
	}
	if !devcluster.SupportedNomad(version) {
		say("%s is %s; the demo is tested with Nomad %s and v2.0.5 (1.11.x and 2.0.x are supported)", nomadBin, version, devcluster.NomadVersion)
	}
	if pluginBin == "" { // in a checkout
		say("building the device plugin")
		if pluginBin, err = devcluster.BuildPlugin(ctx, host.root, dir); err != nil {
			return err
		}
	}
	say("Nomad: %s; plugin: %s", nomadBin, pluginBin)
	var clients []devcluster.Client
	for _, c := range []struct{ name, fixture, rack string }{
		{"hgx-h100", fixtures.HGXH100, "r1"}, {"dgx1-v100", fixtures.DGX1V100, "r1"}, {"pcie-p100", fixtures.PCIe4GPU, "r2"},
	} {
		p, err := fixtures.WriteTo(c.fixture, dir)
		if err != nil {
			return err
		}
		clients = append(clients, devcluster.Client{Name: c.name, Fixture: p, Meta: map[string]string{"rack": c.rack}})
	}
	say("starting %s: one server and three clients with fixture GPUs (HGX H100, DGX-1 V100, 4 x PCIe P100)", version)
	c, err := devcluster.Start(ctx, devcluster.Options{Dir: filepath.Join(dir, "cluster"), NomadBin: nomadBin, PluginBin: pluginBin, Clients: clients,
		Log: func(s string) { say("%s", s) }})
	if err != nil {
		return err
	}
	defer c.Stop()

	cfg := config.Default()
	cfg.Nomad.Address = c.Address()
	cfg.HTTPAddress = "127.0.0.1:0"
	cfg.Leader.TTL, cfg.Leader.LockDelay = "10s", "1s"
	logf, err := os.Create(filepath.Join(dir, "scheduler.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	svc, err := service.New(cfg, hclog.New(&hclog.LoggerOptions{Name: "gpushare", Level: hclog.Info, Output: logf}))
	if err != nil {
		return err
	}
	httpAddr, err := svc.Listen()
	if err != nil {
		return err
	}
	svcCtx, stopSvc := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(svcCtx) }()
	defer func() { stopSvc(); <-done }()
	say("gpushare scheduler running, API at http://%s (/v1/gpus, /v1/jobs/<id>, /metrics)", httpAddr)

	var ids []string
	for _, name := range jobspecs.DemoExampleNames() {
		src, err := fs.ReadFile(jobspecs.Examples, name)
		if err != nil {
			return err
		}
		job, err := jobspecs.Parser{Nomad: c.API()}.Parse(name, src, nil)
		if err != nil {
			return err
		}
		if _, _, err := c.API().Jobs().Register(job, nil); err != nil {
			return fmt.Errorf("registering %s: %w", name, err)
		}
		ids = append(ids, *job.ID)
		say("registered jobspecs/%s (job %q, gated: gpushare places it)", name, *job.ID)
	}
	if err := waitJobs(ctx, c.API(), ids, timeout, io); err != nil {
		return err
	}
	for _, id := range ids {
		job, _, err := c.API().Jobs().Info(id, nil)
		if err != nil {
			continue
		}
		for _, tg := range job.TaskGroups {
			if rec, ok := pin.ParseRecord(job, *tg.Name); ok {
				say("%s/%s: %s", id, *tg.Name, rec.Summary())
			}
		}
	}
	m, err := fetchMap(c.API())
	if err != nil {
		return err
	}
	say("the GPU map (`gpushare status`):\n")
	if err := gpumap.Render(io.Out, m); err != nil {
		return err
	}
	if keep {
		wd, _ := os.Getwd()
		cmd := host.commandName(wd)
		say("cluster is up: Nomad at %s, scheduler API at http://%s, its page at http://%s/ui; %s", c.Address(), httpAddr, httpAddr, demoStopHint(cmd))
		try := fmt.Sprintf("try, in another terminal:\n\n  export NOMAD_ADDR=%s %s=http://%s\n  %s status\n  %s job status train-pair\n", c.Address(), EnvSchedulerAddr, httpAddr, cmd, cmd)
		say("%s", try)
		markReady(try) // gpushare demo -detach returns now
		<-ctx.Done()
		say("stopping the cluster")
		return nil
	}
	// not from a terminal: the addresses above are gone once this returns
	say("stopping the cluster: its addresses above no longer answer (run with -keep to keep it up until Ctrl-C)")
	return nil
}

// waitJobs waits until every job's allocations are running (or done, for
// batch jobs), printing progress, for at most timeout.
func waitJobs(ctx context.Context, client *api.Client, ids []string, timeout time.Duration, io IO) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ready := 0
		for _, id := range ids {
			job, _, err := client.Jobs().Info(id, nil)
			if err != nil {
				continue
			}
			want := 0
			for _, tg := range job.TaskGroups {
				want += *tg.Count
			}
			allocs, _, _ := client.Jobs().Allocations(id, false, nil)
			got := 0
			for _, a := range allocs {
				if a.ClientStatus == "running" || a.ClientStatus == "complete" {
					got++
				}
			}
			if got >= want && len(pin.Gated(job)) == 0 {
				ready++
			}
		}
		line := fmt.Sprintf("==> %d of %d example jobs placed and running", ready, len(ids))
		if line != last {
			fmt.Fprintln(io.Out, line)
			last = line
		}
		if ready == len(ids) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("example jobs not all running after %s (a busy machine may need a longer -timeout)", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
