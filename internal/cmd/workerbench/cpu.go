package main

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTimes is the CPU time used so far by the benchmark's own process, GoAws and PostgreSQL.
type cpuTimes struct{ self, goaws, postgres time.Duration }

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{a.self - b.self, a.goaws - b.goaws, a.postgres - b.postgres}
}

// cpuMeter reads the CPU times of the three processes from /proc. A pid of 0 (a server the
// harness did not start) reads as no time at all.
type cpuMeter struct{ goaws, postmaster int }

func (m cpuMeter) read() cpuTimes {
	t := cpuTimes{self: procCPU(os.Getpid(), false), goaws: procCPU(m.goaws, false)}
	if m.postmaster != 0 {
		// The postmaster's own time, the time of the children it reaped, and the live backends'.
		t.postgres = procCPU(m.postmaster, true)
		for _, pid := range children(m.postmaster) {
			t.postgres += procCPU(pid, false)
		}
	}
	return t
}

// statFields returns the fields of /proc/<pid>/stat after the command name, so that the state
// is at index 0 and field n of proc(5) is at index n-3.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// procCPU returns utime+stime of pid, plus cutime+cstime (its reaped children's) if reaped.
func procCPU(pid int, reaped bool) time.Duration {
	if pid == 0 {
		return 0
	}
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	last := 12 // stime, field 15
	if reaped {
		last = 14 // cstime, field 17
	}
	var ticks int64
	for i := 11; i <= last; i++ { // utime, field 14
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * clockTick
}

// children returns the pids whose parent is ppid.
func children(ppid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	want := strconv.Itoa(ppid)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) > 1 && f[1] == want {
			out = append(out, pid)
		}
	}
	return out
}
