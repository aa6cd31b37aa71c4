// Package report renders simulation results: markdown tables, CSV files and
// line plots (SVG or PNG, with gonum.org/v1/plot).
package report
