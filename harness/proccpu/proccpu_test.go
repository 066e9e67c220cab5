package proccpu

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestOwnProcess (no server): this process's CPU time grows while it spins, and a pid that does
// not exist reads as 0.
func TestOwnProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc, which only Linux has")
	}
	before := Of(os.Getpid(), false)
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
	}
	if after := Of(os.Getpid(), false); after <= before {
		t.Errorf("CPU time %v after spinning 100 ms, %v before; want more", after, before)
	}
	if Of(0, true) != 0 || Of(1<<30, false) != 0 || Tree(0) != 0 {
		t.Error("pid 0 or a missing pid reads as CPU time")
	}
}
