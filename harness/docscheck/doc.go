// Package docscheck holds tests that keep the repository's documents true and short: the figures
// the README quotes come from BENCHMARKS.md, and the README, BENCHMARKS.md, RELIABILITY.md and the
// CHANGELOG's newest section stay within their word budgets.
package docscheck
