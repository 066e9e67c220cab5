// Package docscheck holds tests that keep the repository's documents true to one another: the
// figures the README quotes come from BENCHMARKS.md.
package docscheck
