package nvml

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/gpushare/gpushare/devicefn"
)

// DefaultXIDRecovery is how long a GPU that raised a critical XID stays
// unhealthy when no further critical XID arrives.
const DefaultXIDRecovery = 5 * time.Minute

// Options configures a Source. The zero value uses the real NVML library.
type Options struct {
	// NVML is the library to use; nil means the real libnvidia-ml.so.1
	// (nvml.New()). Tests pass one of go-nvml's mock servers.
	NVML nvml.Interface
	// Logger receives structured logs; nil discards them.
	Logger hclog.Logger
	// Now returns the current time (stats timestamps, XID recovery); nil
	// means time.Now.
	Now func() time.Time
	// XIDRecovery is how long after its last critical XID a GPU becomes
	// healthy again, provided NVML can still query it. Zero means
	// DefaultXIDRecovery; a negative duration means never (until the source
	// is re-created).
	XIDRecovery time.Duration
	// IgnoredXIDs are XIDs that do not mark a GPU unhealthy, in addition to
	// the application errors 13, 31, 43, 45, 68 and 109, which NVIDIA's
	// k8s-device-plugin ignores too.
	IgnoredXIDs []uint64
	// ProcRoot is where processes' environments are read to tell which
	// shares a GPU process holds; empty means /proc (tests pass a
	// directory laid out like it).
	ProcRoot string
}

// applicationXIDs are caused by the application, not the GPU: the GPU is
// still healthy. The same list as k8s-device-plugin's health check.
var applicationXIDs = []uint64{
	13,  // Graphics Engine Exception
	31,  // GPU memory page fault
	43,  // GPU stopped processing
	45,  // Preemptive cleanup, due to previous errors
	68,  // Video processor exception
	109, // Context Switch Timeout Error
}

// Source is the devicefn.Source of a node's real GPUs, read through NVML.
// It initialises NVML on first use and is safe for concurrent use: calls
// are serialised, as NVML handles are shared.
type Source struct {
	lib         nvml.Interface
	logger      hclog.Logger
	now         func() time.Time
	xidRecovery time.Duration
	ignoredXIDs map[uint64]bool

	mu sync.Mutex
	// ready is true between a successful init and Close.
	ready  bool
	closed bool
	// initFailed remembers that the last init failed, so that a node
	// without GPUs logs the reason once rather than every fingerprint.
	initFailed bool
	// gpus are the GPUs NVML enumerated at init, in index order.
	gpus []*gpu
	// events receives critical XIDs; nil when no GPU supports them.
	events nvml.EventSet
	// last is the last inventory read in full, reported again (with a
	// warning) when a later read fails, for example because a GPU is lost.
	last      *devicefn.Inventory
	usingLast bool
	// migLogged holds the UUIDs of MIG-enabled GPUs already logged.
	migLogged map[string]bool
	// procs reads GPU processes' environments; unreadable holds the PIDs
	// already logged as unreadable.
	procs      devicefn.ProcFS
	unreadable map[int]bool
}

// gpu is one GPU as enumerated at init, with its health state.
type gpu struct {
	index int
	uuid  string
	dev   nvml.Device
	// xid is the last critical XID and xidAt when it arrived; xidAt is
	// zero when no critical XID is pending.
	xid   uint64
	xidAt time.Time
	// reported is the reason last returned by Health ("" = healthy), to log
	// transitions only.
	reported string
	// procSeen is the timestamp of the newest per-process utilisation
	// sample read: the next read asks for newer ones.
	procSeen uint64
}

var _ devicefn.Source = (*Source)(nil)

// errClosed is returned by every method called after Close.
var errClosed = errors.New("nvml source is closed")

// New returns a Source. It does not touch NVML: the library is loaded and
// initialised on first use, so New never fails.
func New(opts Options) *Source {
	s := &Source{
		lib:         opts.NVML,
		logger:      opts.Logger,
		now:         opts.Now,
		xidRecovery: opts.XIDRecovery,
		ignoredXIDs: make(map[uint64]bool, len(applicationXIDs)+len(opts.IgnoredXIDs)),
		migLogged:   map[string]bool{},
		procs:       devicefn.ProcFS{Root: opts.ProcRoot},
		unreadable:  map[int]bool{},
	}
	if s.lib == nil {
		s.lib = nvml.New()
	}
	if s.logger == nil {
		s.logger = hclog.NewNullLogger()
	}
	s.logger = s.logger.Named("nvml")
	if s.now == nil {
		s.now = time.Now
	}
	if s.xidRecovery == 0 {
		s.xidRecovery = DefaultXIDRecovery
	}
	for _, x := range applicationXIDs {
		s.ignoredXIDs[x] = true
	}
	for _, x := range opts.IgnoredXIDs {
		s.ignoredXIDs[x] = true
	}
	return s
}

// Name implements devicefn.Source.
func (s *Source) Name() string { return "nvml" }

// Close frees the XID event set and shuts NVML down. It is idempotent;
// every other method fails after it.
func (s *Source) Close() (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.recoverPanic("close", &err)
	if s.closed {
		return nil
	}
	s.closed = true
	if !s.ready {
		return nil
	}
	return s.shutdown()
}

// shutdown releases what init acquired. Called with mu held.
func (s *Source) shutdown() error {
	var errs []error
	if s.events != nil {
		if ret := s.events.Free(); ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("free NVML event set: %w", ret))
		}
		s.events = nil
	}
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		errs = append(errs, fmt.Errorf("shut down NVML: %w", ret))
	}
	s.ready = false
	s.gpus = nil
	return errors.Join(errs...)
}

// recoverPanic turns a panic inside NVML (or a mock missing a function)
// into an error, so that a broken library never takes the plugin down.
func (s *Source) recoverPanic(op string, err *error) {
	if r := recover(); r != nil {
		s.logger.Error("panic in an NVML call", "op", op, "panic", fmt.Sprint(r))
		*err = fmt.Errorf("nvml %s: unexpected panic in the NVML library: %v", op, r)
	}
}

// ensure initialises NVML, enumerates the GPUs and registers for XID
// events, once. A failed start is retried on the next call, so a driver
// installed later is picked up; its reason is logged once. Called with mu
// held.
func (s *Source) ensure() error {
	if s.closed {
		return errClosed
	}
	if s.ready {
		return nil
	}
	if err := s.start(); err != nil {
		if !s.initFailed {
			s.logger.Warn("cannot use NVML; reporting no GPUs", "error", err)
		} else {
			s.logger.Debug("still cannot use NVML", "error", err)
		}
		s.initFailed = true
		return err
	}
	s.initFailed = false
	s.logger.Info("initialised NVML", "gpus", len(s.gpus), "xid_events", s.events != nil)
	return nil
}

func (s *Source) start() error {
	if err := s.initLibrary(); err != nil {
		return err
	}
	defer func() {
		// Undo Init when enumeration fails or panics.
		if !s.ready {
			s.lib.Shutdown()
		}
	}()
	gpus, err := s.enumerate()
	if err != nil {
		return err
	}
	s.gpus = gpus
	s.events = s.registerEvents(gpus)
	s.ready = true
	return nil
}

// initLibrary loads and initialises NVML. Every failure wraps
// devicefn.ErrUnavailable with a hint at what to check.
func (s *Source) initLibrary() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: NVML library could not be loaded (%v): is the NVIDIA driver installed?",
				devicefn.ErrUnavailable, r)
		}
	}()
	switch ret := s.lib.Init(); ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w: NVML library not found: is the NVIDIA driver installed? "+
			"libnvidia-ml.so.1 must be on the library path of the Nomad client (%w)",
			devicefn.ErrUnavailable, ret)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: NVIDIA kernel driver not loaded: is the nvidia kernel module loaded? (%w)",
			devicefn.ErrUnavailable, ret)
	case nvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("%w: no permission to use NVML: the Nomad client must be able to open /dev/nvidiactl and /dev/nvidia* (%w)",
			devicefn.ErrUnavailable, ret)
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return fmt.Errorf("%w: NVML library and NVIDIA kernel driver versions differ: reload the nvidia module or reboot after a driver upgrade (%w)",
			devicefn.ErrUnavailable, ret)
	default:
		return fmt.Errorf("%w: NVML init failed: %w", devicefn.ErrUnavailable, ret)
	}
}

// enumerate lists the GPUs by NVML index. A GPU that NVML cannot open or
// name is left out with a warning rather than hiding every other GPU.
func (s *Source) enumerate() ([]*gpu, error) {
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML cannot count the GPUs: %w", devicefn.ErrUnavailable, ret)
	}
	gpus := make([]*gpu, 0, n)
	for i := range n {
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			s.logger.Warn("skipping GPU that NVML cannot open", "gpu_index", i, "error", ret)
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			s.logger.Warn("skipping GPU whose UUID NVML cannot read", "gpu_index", i, "error", ret)
			continue
		}
		gpus = append(gpus, &gpu{index: i, uuid: uuid, dev: dev})
	}
	return gpus, nil
}

// unsupported reports whether ret says the GPU or driver lacks a feature,
// which leaves the field at its "unknown" value rather than failing.
func unsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// gpuErr names the GPU and the NVML function that failed; it wraps ret so
// that callers can test errors.Is(err, nvml.ERROR_GPU_IS_LOST).
func gpuErr(g *gpu, what string, ret nvml.Return) error {
	return fmt.Errorf("gpu %d (%s): %s: %w", g.index, g.uuid, what, ret)
}
