package sqstest

import "syscall"

// procAttr makes the kernel kill GoAws when the process that started it dies, so a test binary
// killed by a timeout or a signal leaves no server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
