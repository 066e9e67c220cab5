package pgtest

import "syscall"

// watchdogAttr runs the watchdog as the cluster's user, in a process group of its own, and has
// the kernel send it SIGTERM when the process that started it dies.
func watchdogAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
