package outbox_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/internal/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
)

const benchSenders = 4

// BenchmarkRelay measures, in the same run, the relay's publish rate (rows committed before
// Start, until all are marked sent) against a raw loop of SendMessageBatch calls of ten on the
// same server with the same number of senders. It runs benchRounds rounds, alternating which
// side goes first (the first to run warms the server for the other), prints each round's ratio
// and the CPU time per message of the test process, the SQS server and PostgreSQL where /proc
// tells them, and reports the median ratio and the range.
func BenchmarkRelay(b *testing.B) {
	srv.Need(b, sqstest.SendBatchResults)
	const n, benchRounds = 3000, 4
	bn := setup(b, nil)
	var ratios []float64
	for i := 0; i < b.N; i++ {
		for round := range benchRounds {
			var raw, relay benchSide
			if round%2 == 0 {
				raw, relay = measure(b, bn, n, rawSide), measure(b, bn, n, relaySide)
			} else {
				relay, raw = measure(b, bn, n, relaySide), measure(b, bn, n, rawSide)
			}
			ratio := relay.rate / raw.rate
			ratios = append(ratios, ratio)
			first := "raw"
			if round%2 == 1 {
				first = "relay"
			}
			fmt.Printf("round %d (%s first): relay %.0f msgs/s, raw SendMessageBatch %.0f msgs/s, %d senders each: ratio %.2f\n",
				round+1, first, relay.rate, raw.rate, benchSenders, ratio)
			if relay.cpu.ok && raw.cpu.ok {
				fmt.Printf("  CPU µs per message, relay / raw: test process %.0f / %.0f, SQS server %.0f / %.0f, PostgreSQL %.0f / %.0f\n",
					relay.cpu.self, raw.cpu.self, relay.cpu.server, raw.cpu.server, relay.cpu.postgres, raw.cpu.postgres)
			}
		}
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
	b.ReportMetric(ratios[0], "min-ratio")
	b.ReportMetric(ratios[len(ratios)-1], "max-ratio")
	fmt.Printf("ratio over %d rounds: median %.2f, range %.2f to %.2f\n", len(ratios), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
}

// benchSide is what measure found: the rate, and the CPU time per message.
type benchSide struct {
	rate float64
	cpu  cpuPerMessage
}

// measure runs side on a fresh queue for n messages, returning its rate and CPU cost.
func measure(b *testing.B, bn *bundle, n int, side func(*testing.B, *bundle, string, int, *stopwatch)) benchSide {
	q := srv.CreateQueue(b, sqstest.QueueOptions{Prefix: "bench"})
	sw := &stopwatch{b: b, bn: bn}
	side(b, bn, q.URL, n, sw)
	s := benchSide{rate: float64(n) / sw.took.Seconds()}
	if sw.ok {
		per := func(t0, t1 int64) float64 { return float64(t1-t0) * 1e6 / float64(clockTicks) / float64(n) }
		s.cpu = cpuPerMessage{ok: true, self: per(sw.cpu0.self, sw.cpu1.self), server: per(sw.cpu0.server, sw.cpu1.server),
			postgres: per(sw.cpu0.postgres, sw.cpu1.postgres)}
	}
	return s
}

// stopwatch times the measured part of a side, and reads the CPU times at its ends.
type stopwatch struct {
	b          *testing.B
	bn         *bundle
	began      time.Time
	took       time.Duration
	cpu0, cpu1 cpuTicks
	ok         bool
}

func (sw *stopwatch) start() {
	sw.cpu0, sw.ok = readCPU(sw.b, sw.bn)
	sw.began = time.Now()
}

func (sw *stopwatch) stop() {
	sw.took = time.Since(sw.began)
	var ok bool
	sw.cpu1, ok = readCPU(sw.b, sw.bn)
	sw.ok = sw.ok && ok
}

// relaySide and rawSide are the two sides on a standard queue (see relayGroupsSide and
// rawGroupsSide in bench_fifo_test.go).
var relaySide, rawSide = relayGroupsSide(0), rawGroupsSide(0)

// cpuPerMessage is CPU time in microseconds per message, where ok.
type cpuPerMessage struct {
	ok                     bool
	self, server, postgres float64
}

// cpuTicks is CPU time (user and system) in clock ticks: of the test process, of its child
// processes (the SQS server the harness started) and of the PostgreSQL server (its postmaster,
// the children it reaped, and its running children).
type cpuTicks struct{ self, server, postgres int64 }

// clockTicks is USER_HZ, which is 100 on every Linux architecture Go supports.
const clockTicks = 100

// readCPU reads cpuTicks from /proc; ok is false where it cannot (not Linux, or a PostgreSQL
// server of another machine).
func readCPU(b *testing.B, bn *bundle) (cpuTicks, bool) {
	var backend int
	if err := bn.pool.QueryRow(b.Context(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatal(err)
	}
	procs, err := readProcs()
	if err != nil {
		return cpuTicks{}, false
	}
	pb, ok := procs[backend]
	if !ok {
		return cpuTicks{}, false
	}
	postmaster, self := pb.ppid, os.Getpid()
	var t cpuTicks
	t.self = procs[self].own
	t.postgres = procs[postmaster].own + procs[postmaster].children
	for _, p := range procs {
		switch p.ppid {
		case postmaster:
			t.postgres += p.own
		case self:
			t.server += p.own + p.children
		}
	}
	return t, true
}

type procCPU struct {
	ppid          int
	own, children int64 // utime+stime, cutime+cstime
}

// readProcs reads every process's parent and CPU times from /proc/PID/stat.
func readProcs() (map[int]procCPU, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int]procCPU{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command name, which is in parentheses and may hold anything.
		i := strings.LastIndexByte(string(raw), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(raw[i+1:]))
		if len(f) < 15 {
			continue
		}
		num := func(k int) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
		// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14 to 17.
		out[pid] = procCPU{ppid: int(num(1)), own: num(11) + num(12), children: num(13) + num(14)}
	}
	return out, nil
}

// BenchmarkAdd measures a transaction (BEGIN, one business INSERT, COMMIT) with and without an
// Add of the event, alternating in the same run, and reports the overhead per event.
func BenchmarkAdd(b *testing.B) {
	bn := setup(b, nil)
	ctx := b.Context()
	if _, err := bn.pool.Exec(ctx, "CREATE TABLE "+bn.schema+".orders (id bigserial PRIMARY KEY, status text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	insert := "INSERT INTO " + bn.schema + ".orders (status) VALUES ('PAID')"
	msg := outbox.Message{Destination: queueURL, Body: `{"type":"OrderPaid","order":"o-1"}`}
	run := func(withAdd bool) time.Duration {
		began := time.Now()
		err := pgx.BeginFunc(ctx, bn.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, insert); err != nil {
				return err
			}
			if withAdd {
				_, err := bn.ob.Add(ctx, tx, msg)
				return err
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(began)
	}
	var with, without time.Duration
	for i := 0; i < b.N; i++ {
		without += run(false)
		with += run(true)
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(without), "without-ns/tx")
	b.ReportMetric(per(with), "with-ns/tx")
	b.ReportMetric(per(with)/per(without), "ratio")
	b.ReportMetric(per(with)-per(without), "overhead-ns/event")
}
