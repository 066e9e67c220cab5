//go:build !linux

package main

import "syscall"

// childProcAttr has nothing to add outside Linux: a test binary killed by a timeout may leave an
// example process running.
func childProcAttr() *syscall.SysProcAttr { return nil }
