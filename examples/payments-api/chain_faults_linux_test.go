package main

import "syscall"

// childProcAttr makes the kernel kill an example process when the test binary dies (a timeout,
// a signal), so no server or worker is left behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
