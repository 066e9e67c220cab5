//go:build !linux

package pgtest

import "syscall"

// watchdogAttr cannot ask for a parent-death signal outside Linux: the watchdog only waits to be
// killed, and a killed test binary leaves the cluster running.
func watchdogAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
