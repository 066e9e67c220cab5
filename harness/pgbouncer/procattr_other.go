//go:build !linux

package pgbouncer

import "syscall"

// procAttr runs the pooler as cred (nil: the current user). Outside Linux a killed test binary may
// leave the pooler running.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
