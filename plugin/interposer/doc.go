// Package interposer holds the tests of gpushare's CUDA driver API
// interposer, libgpushare-cuda.so: a small C library (src/) loaded into a
// task's processes in front of the real libcuda.so.1 (and, for memory
// info, libnvidia-ml.so.1) that holds the task to its reservation's GPU
// memory and its share of GPU time, and runs the TGS loop between
// production and opportunistic tasks on a GPU. Its only Go code is Sources (the C files to build); its tests
// build the library, a fake libcuda.so.1, a fake libnvidia-ml.so.1 and test
// programs (testdata/) with the C compiler and run them. README.md describes the
// library: what it intercepts, where its limits come from, the shared usage
// region, NVML, unified memory, compute control, and what escapes it.
package interposer
