package reliability

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the process when the test binary dies (a timeout, a
// signal), so that no worker or server of a test is left running.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
}
