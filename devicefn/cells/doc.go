// Package cells derives HiveD-style cells from a node's GPU topology: a tree
// whose leaves are GPUs and whose inner cells are the best-connected pairs,
// the groups of pairs, the NUMA nodes and finally the node itself. Cells are
// derived from the link matrix and NUMA nodes alone, never configured, and
// cells of one tree never overlap: every cell is the disjoint union of its
// children.
package cells
