// Package queue holds the order in which gpushare serves waiting jobs,
// shared by the scheduler service and the simulator so that the order the
// simulator measures is the one the service runs.
package queue
