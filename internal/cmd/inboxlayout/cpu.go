package main

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// clusterCPU is the CPU time used so far by the throwaway cluster: the postmaster, the children
// it reaped and its live processes (the backends, the WAL writer, the checkpointer...). 0 when the
// server is not ours.
func (e *env) clusterCPU() time.Duration {
	if e.srv == nil {
		return 0
	}
	pm := e.srv.PostmasterPid()
	if pm == 0 {
		return 0
	}
	t := procCPU(pm, true)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return t
	}
	want := strconv.Itoa(pm)
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) > 1 && f[1] == want {
			t += procCPU(pid, false)
		}
	}
	return t
}

// statFields returns the fields of /proc/<pid>/stat after the command name (state at index 0).
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// procCPU returns utime+stime of pid, plus cutime+cstime when reaped.
func procCPU(pid int, reaped bool) time.Duration {
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	last := 12
	if reaped {
		last = 14
	}
	var ticks int64
	for i := 11; i <= last; i++ {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * clockTick
}
