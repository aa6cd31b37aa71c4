// Package queue holds how gpushare serves waiting jobs: the order
// (ResponseRatio) and the reservation a waiting multi-GPU job holds (Hold,
// EASY backfilling). The scheduler service and the simulator both use it,
// so that what the simulator measures is what the service runs.
package queue
