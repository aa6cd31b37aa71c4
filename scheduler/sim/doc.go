// Package sim is the home of gpushare's trace-driven simulators (results in
// docs/results): they replay real cluster traces through the placement core and
// compare gpushare's policy with the baselines in the same run.
//
//   - openb: the Alibaba openb traces with the FGD paper's method
//     (allocation ratio as the arrived GPU demand grows to 130%), validated
//     against the FGD authors' published numbers;
//   - gavel: the Gavel MSR traces in time, with Gavel's measured V100
//     co-location throughputs (job completion time, queueing delay);
//   - report: CSV, markdown tables and plots of the results.
//
// Package sim itself holds what they share: Parallel runs, and NodeSpec, a
// simulated node wired like a named real server of package topologies (the
// placement core takes the link matrix and knows no catalog).
//
// `gpushare sim openb` and `gpushare sim gavel` (package cli) drive them.
package sim
