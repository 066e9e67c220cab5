//go:build !linux

package sqstest

import "syscall"

// procAttr has nothing to add outside Linux: a killed test binary may leave GoAws running.
func procAttr() *syscall.SysProcAttr { return nil }
