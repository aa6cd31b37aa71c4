// Package queue holds how gpushare serves waiting jobs: the order
// (ResponseRatio) and the reservation a waiting multi-GPU job holds (Hold,
// EASY backfilling), and the run time expected of a job that declares
// none, learned from its group's previous runs (Runs). The scheduler
// service and the simulator both use it, so that what the simulator
// measures is what the service runs.
package queue
