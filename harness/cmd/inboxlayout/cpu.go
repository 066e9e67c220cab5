package main

import (
	"time"

	"github.com/sqsinbox/sqsinbox/harness/proccpu"
)

// clusterCPU is the CPU time used so far by the throwaway cluster: the postmaster, the children
// it reaped and its live processes (the backends, the WAL writer, the checkpointer...). 0 when the
// server is not ours.
func (e *env) clusterCPU() time.Duration {
	if e.srv == nil {
		return 0
	}
	return proccpu.Tree(e.srv.PostmasterPid())
}
