// Package proccpu reads processes' CPU time from Linux's /proc, for the benchmarks that print the
// CPU a worker, an SQS server or PostgreSQL used. Elsewhere, and for a pid that is gone, it reads
// no time at all.
package proccpu

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const ClockTick = 10 * time.Millisecond

// Of returns utime+stime of pid, plus cutime+cstime (its reaped children's) if reaped. 0 for pid 0.
func Of(pid int, reaped bool) time.Duration {
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
	return time.Duration(ticks) * ClockTick
}

// Tree returns the CPU time of a server's parent process (a PostgreSQL postmaster): its own, that
// of the children it reaped, and that of its live children (the backends). 0 for pid 0.
func Tree(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	t := Of(pid, true)
	for _, c := range Children(pid) {
		t += Of(c, false)
	}
	return t
}

// Children returns the pids whose parent is ppid.
func Children(ppid int) []int {
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
