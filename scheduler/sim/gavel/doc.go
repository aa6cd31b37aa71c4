// Package gavel simulates GPU jobs in time on the Gavel MSR traces (Gavel,
// OSDI'20) with Gavel's measured V100 throughputs: a job advances at its
// isolated throughput when alone on its GPUs and at its measured co-located
// throughput when it shares a GPU with another job; multi-GPU jobs use the
// throughput measured at their scale factor. Placement goes through the
// placement core; the policies differ in whether, and with whom, a job may
// share a GPU and in the order the queue is served. With Options.Elastic a
// share of the jobs is elastic under the gpushare policies: they grow into
// idle GPUs and shrink back, newest replica first and never below the GPUs
// they asked for, when waiting work needs them (elastic.go).
package gavel
