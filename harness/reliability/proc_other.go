//go:build !linux

package reliability

import "os/exec"

// dieWithParent has nothing to add outside Linux: a test binary killed by a timeout may leave
// its processes running.
func dieWithParent(*exec.Cmd) {}
