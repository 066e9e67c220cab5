package main

import (
	"os"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/proccpu"
)

// cpuTimes is the CPU time used so far by the benchmark's own process, GoAws and PostgreSQL.
type cpuTimes struct{ self, goaws, postgres time.Duration }

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{a.self - b.self, a.goaws - b.goaws, a.postgres - b.postgres}
}

// cpuMeter reads the CPU times of the three processes from /proc. A pid of 0 (a server the
// harness did not start) reads as no time at all.
type cpuMeter struct{ goaws, postmaster int }

func (m cpuMeter) read() cpuTimes {
	return cpuTimes{self: proccpu.Of(os.Getpid(), false), goaws: proccpu.Of(m.goaws, false), postgres: proccpu.Tree(m.postmaster)}
}
