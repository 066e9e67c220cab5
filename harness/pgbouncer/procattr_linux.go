package pgbouncer

import "syscall"

// procAttr runs the pooler as cred (nil: the current user), in a process group of its own, and
// has the kernel kill it when the process that started it dies, so a test binary killed by a
// timeout leaves no pooler behind.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
