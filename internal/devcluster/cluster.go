package devcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Client describes one Nomad client of the cluster.
type Client struct {
	// Name is the node name.
	Name string
	// Fixture is the path of the fixture file its plugin serves.
	Fixture string
	// PluginConfig is extra HCL inside the plugin's config block.
	PluginConfig string
	// MPS is the body of the plugin's mps block; empty means the node
	// daemon mode with directories of the cluster's (fixture GPUs have no
	// MPS), rather than a daemon per reservation.
	MPS string
	// Meta is the node's meta (for example rack).
	Meta map[string]string
	// CPUTotalCompute and MemoryTotalMB, when set, replace the node's
	// fingerprinted CPU (MHz) and memory (MiB), so that a load test of
	// many clients on one small machine is never limited by them.
	CPUTotalCompute int
	MemoryTotalMB   int
	// Datacenter is the node's datacenter; empty means "dc1".
	Datacenter string
	// NodePool is the node's pool; empty means "default". Nomad 1.11
	// creates a pool a node names when the node registers (in the
	// authoritative region, which a local cluster's only region is), so
	// Start need not create it first.
	NodePool string
	// NodeClass is the node's class (${node.class}); empty means none.
	NodeClass string
	// DenyDrivers are task drivers the client does not offer (Nomad's
	// client option driver.denylist), for example "raw_exec": a client
	// without the driver a job uses. A job can still run there with
	// another driver: Nomad built from source (not a release build) always
	// has mock_driver, and as root with cgroups exec and java fingerprint
	// too.
	DenyDrivers []string
}

// datacenter is the client's datacenter, defaulted.
func (cl Client) datacenter() string {
	if cl.Datacenter == "" {
		return "dc1"
	}
	return cl.Datacenter
}

// nodePool is the client's node pool, defaulted.
func (cl Client) nodePool() string {
	if cl.NodePool == "" {
		return "default"
	}
	return cl.NodePool
}

// Options configures a cluster.
type Options struct {
	// Dir holds the cluster's data, plugins, configs and logs.
	Dir       string
	NomadBin  string
	PluginBin string
	// Clients: the first runs inside the dev agent with the server; the
	// others are separate client agents that join it.
	Clients []Client
	// Persistent runs the first agent as a regular server (with its state
	// on disk) instead of -dev, so RestartServer keeps jobs and indexes.
	Persistent bool
	// ACL enables Nomad's ACLs on every agent. Start bootstraps them and
	// keeps the management token for its own API client
	// (ManagementToken); ApplyPolicy and CreateToken make tokens of less.
	ACL bool
	// TLS, when set, makes every agent speak TLS on HTTP and RPC with
	// these files (GenerateTLS makes them); Address is then https://.
	TLS *TLS
	// Log receives progress lines; nil discards them.
	Log func(string)
}

// Cluster is a running local Nomad cluster.
type Cluster struct {
	opts   Options
	addr   string
	client *api.Client
	// token is the management token of an ACL cluster.
	token string

	mu    sync.Mutex
	procs []*proc
}

type proc struct {
	name string
	dir  string
	args []string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// Start launches the cluster and waits until every client has registered
// with its gpushare devices fingerprinted.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Log == nil {
		opts.Log = func(string) {}
	}
	if len(opts.Clients) == 0 {
		return nil, errors.New("a cluster needs at least one client")
	}
	for _, p := range []*string{&opts.NomadBin, &opts.PluginBin, &opts.Dir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	pluginDir := filepath.Join(opts.Dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return nil, err
	}
	if err := linkOrCopy(opts.PluginBin, filepath.Join(pluginDir, "nomad-device-gpushare")); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts}
	ports, err := freePorts(3 + 2*len(opts.Clients))
	if err != nil {
		return nil, err
	}
	scheme := "http://"
	if opts.TLS != nil {
		scheme = "https://"
	}
	c.addr = scheme + "127.0.0.1:" + strconv.Itoa(ports[0])
	c.client, err = api.NewClient(apiConfig(c.addr, opts))
	if err != nil {
		return nil, err
	}
	server := "127.0.0.1:" + strconv.Itoa(ports[1])
	if opts.Persistent {
		// a server-only agent with its state on disk, so it can restart
		dir := filepath.Join(opts.Dir, "server")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		cfg := serverConfig(dir, ports[0], ports[1], ports[2]) + securityConfig(opts)
		if err := os.WriteFile(filepath.Join(dir, "agent.hcl"), []byte(cfg), 0o644); err != nil {
			return nil, err
		}
		if err := c.spawn("server", dir, []string{"agent", "-config", filepath.Join(dir, "agent.hcl")}); err != nil {
			return nil, err
		}
		// clients that find no server, or a server without its keyring,
		// back off for many seconds
		if err := c.waitLeader(ctx); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for i, cl := range opts.Clients {
		name := cl.Name
		if name == "" {
			name = fmt.Sprintf("client%d", i)
		}
		dir := filepath.Join(opts.Dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		var cfg string
		var args []string
		if i == 0 && !opts.Persistent {
			cfg = agentConfig(name, dir, pluginDir, ports[0], ports[1], ports[2], "", cl) + securityConfig(opts)
			args = []string{"agent", "-dev", "-config", filepath.Join(dir, "agent.hcl")}
		} else {
			cfg = agentConfig(name, dir, pluginDir, ports[3+2*i], 0, 0, server, cl) + securityConfig(opts)
			args = []string{"agent", "-config", filepath.Join(dir, "agent.hcl")}
		}
		if err := os.WriteFile(filepath.Join(dir, "agent.hcl"), []byte(cfg), 0o644); err != nil {
			return nil, err
		}
		if err := c.spawn(name, dir, args); err != nil {
			c.Stop()
			return nil, err
		}
		if i == 0 && !opts.Persistent && (len(opts.Clients) > 1 || opts.ACL) {
			if err := c.waitLeader(ctx); err != nil {
				c.Stop()
				return nil, err
			}
		}
	}
	opts.Log(fmt.Sprintf("nomad (%s) at %s with %d client(s); logs in %s", opts.NomadBin, c.addr, len(opts.Clients), opts.Dir))
	if err := c.waitReady(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// serverConfig writes the HCL of a server-only agent.
func serverConfig(dir string, http, rpc, serf int) string {
	return fmt.Sprintf(`name = "server"
data_dir = %q
bind_addr = "127.0.0.1"
log_level = "DEBUG"
advertise {
  http = "127.0.0.1"
  rpc = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = %d
  rpc = %d
  serf = %d
}
server {
  enabled = true
  bootstrap_expect = 1
}
client {
  enabled = false
}
`, filepath.Join(dir, "data"), http, rpc, serf)
}

// agentConfig writes the HCL of one agent. server is empty for the dev
// agent, which runs the server itself.
func agentConfig(name, dir, pluginDir string, http, rpc, serf int, server string, cl Client) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name = %q\ndatacenter = %q\ndata_dir = %q\nbind_addr = \"127.0.0.1\"\nplugin_dir = %q\nlog_level = \"DEBUG\"\n", name, cl.datacenter(), filepath.Join(dir, "data"), pluginDir)
	b.WriteString("advertise {\n  http = \"127.0.0.1\"\n  rpc = \"127.0.0.1\"\n  serf = \"127.0.0.1\"\n}\n")
	if server == "" {
		fmt.Fprintf(&b, "ports {\n  http = %d\n  rpc = %d\n  serf = %d\n}\n", http, rpc, serf)
	} else {
		fmt.Fprintf(&b, "ports {\n  http = %d\n}\nserver {\n  enabled = false\n}\n", http)
	}
	b.WriteString("client {\n  enabled = true\n")
	if server != "" {
		fmt.Fprintf(&b, "  servers = [%q]\n", server)
	}
	// cloud fingerprinters probe the network (and env_aws fails on this
	// machine's AWS_CA_BUNDLE); a local cluster needs none of them
	fmt.Fprintf(&b, "  node_pool = %q\n", cl.nodePool())
	if cl.NodeClass != "" {
		fmt.Fprintf(&b, "  node_class = %q\n", cl.NodeClass)
	}
	b.WriteString("  options = {\n    \"fingerprint.denylist\" = \"env_aws,env_gce,env_azure,env_digitalocean\"\n")
	if len(cl.DenyDrivers) > 0 {
		// the dev agent enables raw_exec through the legacy client option
		// driver.raw_exec.enable; the denylist keeps any driver unloaded
		fmt.Fprintf(&b, "    \"driver.denylist\" = %q\n", strings.Join(cl.DenyDrivers, ","))
	}
	b.WriteString("  }\n")
	if cl.CPUTotalCompute > 0 {
		fmt.Fprintf(&b, "  cpu_total_compute = %d\n", cl.CPUTotalCompute)
	}
	if cl.MemoryTotalMB > 0 {
		fmt.Fprintf(&b, "  memory_total_mb = %d\n", cl.MemoryTotalMB)
	}
	if len(cl.Meta) > 0 {
		b.WriteString("  meta {\n")
		for _, k := range slices.Sorted(maps.Keys(cl.Meta)) {
			fmt.Fprintf(&b, "    %q = %q\n", k, cl.Meta[k])
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	if !slices.Contains(cl.DenyDrivers, "raw_exec") {
		b.WriteString("plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n")
	}
	mps := cl.MPS
	if mps == "" {
		mps = fmt.Sprintf("daemons = \"node\"\npipe_directory = %q\nlog_directory = %q", filepath.Join(dir, "mps-pipe"), filepath.Join(dir, "mps-log"))
	}
	fmt.Fprintf(&b, "plugin \"nomad-device-gpushare\" {\n  config {\n    fixture = %q\n    fingerprint_period = \"1s\"\n    mps {\n%s\n    }\n%s\n  }\n}\n",
		cl.Fixture, mps, cl.PluginConfig)
	return b.String()
}

func (c *Cluster) spawn(name, dir string, args []string) error {
	for _, d := range []string{"mps-pipe", "mps-log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(filepath.Join(dir, "nomad.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.opts.NomadBin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// its own process group, so Stop reaches every child; and killed with
	// the test process should that die first
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting nomad agent %s: %w", name, err)
	}
	p := &proc{name: name, dir: dir, args: args, cmd: cmd, log: logf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

// waitLeader waits until the server has elected a leader, bootstrapped
// its ACLs (ACL clusters) and initialised its keyring (clients cannot
// register before).
func (c *Cluster) waitLeader(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if leader, err := c.client.Status().Leader(); err == nil && leader != "" && c.bootstrap() {
			if keys, _, err := c.client.Keyring().List(nil); err == nil && len(keys) > 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nomad server elected no leader within a minute; agent logs are in %s", c.opts.Dir)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReady waits until every client is ready and shows gpushare devices
// (shares or MIG instances).
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	want := len(c.opts.Clients)
	var last string
	for {
		ready := 0
		nodes, _, err := c.client.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
		if err == nil {
			for _, n := range nodes {
				if n.Status != "ready" || n.NodeResources == nil {
					continue
				}
				for _, d := range n.NodeResources.Devices {
					// shares, or MIG instances on a node whose GPUs are all in MIG mode
					if (d.Type == "gpushare" || d.Type == "gpushare-mig") && len(d.Instances) > 0 {
						ready++
						break
					}
				}
			}
			last = fmt.Sprintf("%d of %d clients ready with gpushare devices", ready, want)
		} else {
			last = err.Error()
		}
		if ready == want {
			return nil
		}
		for _, p := range c.procs {
			select {
			case <-p.done:
				return fmt.Errorf("nomad agent %s exited during start-up; see %s", p.name, p.log.Name())
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %s; agent logs are in %s", last, c.opts.Dir)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// RestartServer stops the server agent with SIGTERM, waits for it to exit
// and starts it again with the same configuration (Persistent clusters).
func (c *Cluster) RestartServer(ctx context.Context) error {
	c.mu.Lock()
	if len(c.procs) == 0 {
		c.mu.Unlock()
		return errors.New("cluster is stopped")
	}
	p := c.procs[0]
	c.procs = c.procs[1:]
	c.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.log.Close()
	if err := c.spawn(p.name, p.dir, p.args); err != nil {
		return err
	}
	c.mu.Lock()
	// keep the server first
	last := c.procs[len(c.procs)-1]
	copy(c.procs[1:], c.procs[:len(c.procs)-1])
	c.procs[0] = last
	c.mu.Unlock()
	return c.waitReady(ctx)
}

// API returns a Nomad API client for the cluster.
func (c *Cluster) API() *api.Client { return c.client }

// Dir is the directory of the cluster's data, configs and logs.
func (c *Cluster) Dir() string { return c.opts.Dir }

// Address is the HTTP address of the server.
func (c *Cluster) Address() string { return c.addr }

// Stop terminates every agent, then kills whatever they left behind (task
// processes of raw_exec allocations, executors, plugins). It is safe to
// call more than once.
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	for _, p := range procs {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		p.log.Close()
	}
	killUnder(c.opts.Dir)
	unmountUnder(c.opts.Dir)
}

// unmountUnder detaches every mount below dir, deepest first: the secrets
// and private directories a Nomad client mounts for each allocation, which
// it leaves behind when it stops before its allocations are collected.
// Without this every run leaves mounts in the host's mount table and
// directories nobody can remove.
func unmountUnder(dir string) {
	if dir == "" {
		return
	}
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	prefix := filepath.Clean(dir) + "/"
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if mp := unescapeMount(f[1]); strings.HasPrefix(mp, prefix) {
			points = append(points, mp)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range points {
		_ = syscall.Unmount(mp, syscall.MNT_DETACH)
	}
}

// unescapeMount undoes the octal escapes of /proc/self/mounts (\040 for a
// space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// killUnder kills every process whose command line or working directory
// lies under dir: the tasks and executors of the cluster's allocations,
// which Nomad starts in process groups of their own.
func killUnder(dir string) {
	entries, err := os.ReadDir("/proc")
	if err != nil || dir == "" {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if strings.Contains(string(cmdline), dir) || strings.HasPrefix(cwd, dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func linkOrCopy(src, dst string) error {
	_ = os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
