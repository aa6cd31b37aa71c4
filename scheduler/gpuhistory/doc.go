// Package gpuhistory keeps what the GPUs did: each GPU's latest stats
// (utilisation, memory used and total, power, temperature, as the device
// plugin reports them per share through Nomad's client stats), and the
// last hour of each GPU's and each job's utilisation in ring buffers of
// fixed size (one point per observe interval), so that memory stays
// bounded whatever the cluster does. The scheduler records a round of
// stats every observe interval (Store.Record); /v1/gpus, /v1/history and
// the web page read it.
package gpuhistory
