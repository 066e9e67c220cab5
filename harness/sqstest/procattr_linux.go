package sqstest

import "syscall"

// procAttr makes the kernel kill the server when the process that started it dies, so a test
// binary (or `make dev`) killed by a timeout or a signal leaves no server behind. The server gets
// a process group of its own: a terminal's Ctrl-C goes to the process that started it, which
// stops it, and never kills it behind that process's back.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
