// Package interference predicts how much jobs slow each other down when they
// share one GPU, so that the placement core can pair jobs that get along and
// keep production jobs within their slowdown bound.
//
// A job is described by a Profile: the fraction of the GPU's SMs and of its
// memory bandwidth it would use alone. The Model shares each of the two
// resources between co-located jobs by max-min fairness (water-filling) and
// predicts each job's normalised throughput (co-located / alone) from its
// bottleneck resource, less a fixed context-switch overhead. Profiles come
// from a name (the Gavel job types, fitted to Gavel's measured V100
// co-location throughputs by Fit), from declared values, or from
// observations of a job running alone (Learn).
package interference
