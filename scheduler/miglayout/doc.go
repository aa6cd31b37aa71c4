// Package miglayout recommends a MIG layout per node and GPU model from the
// demand the scheduler sees, with the fragmentation it would save. It is
// pure: the service gives it the nodes' MIG-enabled GPUs (FromNomad) and the
// demand, and shows what Recommend returns; nothing here changes a GPU (the
// plugin applies the layouts its mig block lists, on idle GPUs).
//
// # Demand
//
// The demand is a distribution of request sizes: every waiting or running
// fractional nvidia/gpushare request (fewer shares than a GPU's
// shares_per_gpu), weighted by its allocations, and every request of a whole
// MIG instance (nvidia/gpushare-mig/<profile>), weighted by its instances.
// A request that names models counts only on GPUs of those models (the
// shared instances of a model, "<model> MIG <profile>", are of that model).
//
// # Fragmentation
//
// Following FGD (Weng et al., ATC'23), the fragmentation of a GPU for one
// request size is the part of the GPU, in shares of the parent
// (shares_per_gpu), that requests of that size cannot use when the GPU is
// filled with them; the expected fragmentation is its mean over the
// demand, weighted. Per instance, for a request of d shares:
//
//   - shared instances (mig_instances = "shared", c shares each): the
//     instance holds floor(c/d) requests; the rest of it is fragmented, so
//     an instance smaller than d counts whole;
//   - whole instances (mig_instances = "whole"): one request per instance;
//     an instance of at least d shares wastes the difference, a smaller one
//     counts whole. A request of a profile is held only by an instance of
//     that profile (Nomad matches the device name), and uses all of it;
//   - on shared instances a request of a profile counts as a request of
//     that profile's shares (3g.20gb of 7 slices at 100: 42);
//   - compute slices in no instance count fully, and so do the shares the
//     plugin's rounding leaves out (seven 1g instances offer 7 x 14 = 98
//     shares of 100).
//
// Requests are sized by their shares only: the memory a share stands for
// is not weighed separately.
//
// A GPU's expected fragmentation is therefore shares_per_gpu minus the
// expected shares its layout puts to use; a node's is the sum over its GPUs
// of the model, also given in compute slices (shares x slices /
// shares_per_gpu).
//
// # Layouts
//
// A layout is a multiset of GPU instance profiles. Only valid layouts are
// considered: their compute slices at most the parent's, and their memory
// slices at most the parent's, a profile's memory slices being its memory
// over the memory of the smallest one-slice profile, rounded (A100-40GB:
// 1g.5gb 1, 2g.10gb 2, 3g.20gb 4, 4g.20gb 4, 7g.40gb 8 of 8). That is the
// rule used, not NVIDIA's placement table: should NVIDIA not offer a
// combination the rule admits, the plugin's NVML apply refuses it before
// anything is destroyed, and logs why. Profiles with media extensions
// ("+me", one per GPU) and compute-instance profiles ("1c.3g.20gb") are
// never recommended. The profiles come from what the plugin publishes per
// parent; an older plugin publishes none, and the standard table of the
// parent's slice count (7: A100, H100; 4: A30) is used, its memory sizes
// derived from the profile names present ("<g>g.<mem>gb"). At most
// MaxLayouts layouts are enumerated (a 7-slice GPU has a few dozen).
//
// # Robustness
//
// A demand estimate is only an estimate. A change is recommended only when
// it saves at least Options.MinRelative of the current fragmentation and
// Options.MinShares shares per GPU; on a tie the current layout is kept;
// without demand for a model nothing is recommended. Among layouts of equal
// fragmentation the one with more instances wins (a small request that was
// not expected still fits), then the one with fewer compute slices, then
// fewer memory slices, in instances (no instance larger than the demand
// needs: seven 1g.5gb rather than six and a 1g.10gb).
package miglayout
