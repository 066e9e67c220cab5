package outbox_test

import (
	"cmp"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/latency"
	"github.com/sqsinbox/sqsinbox/harness/reqcount"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
)

const benchSenders = 4

// BenchmarkRelay measures, in the same run, the relay at its defaults (rows committed before
// Start, until all are marked sent) against a raw loop of SendMessageBatch calls of ten on the
// same server at its best parallelism of 4, 16 and 64 senders, with SQS behind a proxy that
// adds each round-trip time of SQSINBOX_BENCH_SQS_RTT (milliseconds, comma-separated; default
// 0,20; 0 goes direct). Each of SQSINBOX_BENCH_ROUNDS rounds (default 4) runs every cell,
// alternating which side goes first (the first to run warms the server for the other). It
// prints each run's rates, the relay's senders at the end and the CPU time per message of the
// test process, the SQS server and PostgreSQL where /proc tells them, and per cell the median
// and range of relay / raw and of the relay's rate against its own with no added latency.
func BenchmarkRelay(b *testing.B) {
	srv.Need(b, sqstest.SendBatchResults)
	n := envInt(b, "SQSINBOX_BENCH_N", 5000)
	rounds := envInt(b, "SQSINBOX_BENCH_ROUNDS", 4)
	rtts := envMillis(b, "SQSINBOX_BENCH_SQS_RTT", "0,20")
	bn := setup(b, nil)
	proxy, proxied := proxiedClient(b)
	ratios := make([][]float64, len(rtts))  // relay / best raw, per cell
	ownRate := make([][]float64, len(rtts)) // relay / relay with no added latency in the same round
	for i := 0; i < b.N; i++ {
		for round := range rounds {
			var base float64
			for k, rtt := range rtts {
				proxy.SetRTT(rtt, 0)
				client := srv.Client()
				if rtt > 0 {
					client = proxied
				}
				relayRun := func() benchSide { return measure(b, bn, n, relayGroupsSide(0, client, 0)) }
				rawRun := func() (benchSide, int) {
					var best benchSide
					bestN := 0
					for _, senders := range []int{4, 16, 64} {
						if s := measure(b, bn, n, rawGroupsSide(0, client, senders)); s.rate > best.rate {
							best, bestN = s, senders
						}
					}
					return best, bestN
				}
				var relay, raw benchSide
				var rawN int
				first := "raw"
				if round%2 == 0 {
					raw, rawN = rawRun()
					relay = relayRun()
				} else {
					first = "relay"
					relay = relayRun()
					raw, rawN = rawRun()
				}
				if rtt == 0 || k == 0 {
					base = relay.rate
				}
				ratio := relay.rate / raw.rate
				ratios[k] = append(ratios[k], ratio)
				ownRate[k] = append(ownRate[k], relay.rate/base)
				fmt.Printf("round %d, SQS RTT %v (%s first): relay %.0f msgs/s (%d senders at the end), raw SendMessageBatch %.0f msgs/s (best N=%d): ratio %.2f; relay / its rate at %v: %.2f\n",
					round+1, rtt, first, relay.rate, relay.senders, raw.rate, rawN, ratio, rtts[0], relay.rate/base)
				if relay.cpu.ok && raw.cpu.ok {
					fmt.Printf("  CPU µs per message, relay / raw: test process %.0f / %.0f, SQS server %.0f / %.0f, PostgreSQL %.0f / %.0f\n",
						relay.cpu.self, raw.cpu.self, relay.cpu.server, raw.cpu.server, relay.cpu.postgres, raw.cpu.postgres)
				}
			}
		}
	}
	for k, rtt := range rtts {
		med, lo, hi := spread(ratios[k])
		fmt.Printf("SQS RTT %v, %d rounds: relay / raw median %.2f (range %.2f to %.2f)", rtt, len(ratios[k]), med, lo, hi)
		name := fmt.Sprintf("rtt%dms", rtt.Milliseconds())
		b.ReportMetric(med, "median-ratio-"+name)
		if k > 0 {
			m2, lo2, hi2 := spread(ownRate[k])
			fmt.Printf("; relay / its rate at %v median %.2f (range %.2f to %.2f)", rtts[0], m2, lo2, hi2)
			b.ReportMetric(m2, "median-own-"+name)
		}
		fmt.Println()
	}
	relayRequests(b, bn, n)
}

// relayRequests runs the relay once more on the server directly, through a client that counts its
// SQS requests (harness/reqcount), and prints them per 1,000 messages.
func relayRequests(b *testing.B, bn *bundle, n int) {
	rc := reqcount.NewTransport(256)
	c, err := srv.NewClient(b.Context(), func(o *sqs.Options) { o.HTTPClient = rc })
	if err != nil {
		b.Fatal(err)
	}
	measure(b, bn, n, relayGroupsSide(0, c, 0))
	got := rc.Snapshot()
	fmt.Printf("relay, %d messages: %.0f SQS requests per 1,000 messages (%v)\n", n, float64(got.Total())*1000/float64(n), got.By)
	b.ReportMetric(float64(got.Total())/float64(n), "sqs-requests/msg")
}

// spread returns the median, the least and the greatest of v.
func spread(v []float64) (med, lo, hi float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envMillis(b *testing.B, name, def string) []time.Duration {
	v := cmp.Or(os.Getenv(name), def)
	var out []time.Duration
	for _, f := range strings.Split(v, ",") {
		ms, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || ms < 0 {
			b.Fatalf("%s=%q: want milliseconds, comma-separated", name, v)
		}
		out = append(out, time.Duration(ms*float64(time.Millisecond)))
	}
	return out
}

// proxiedClient starts a delaying proxy (harness/latency) in front of the SQS server and returns
// it with a client that goes through it.
func proxiedClient(b testing.TB) (*latency.Proxy, *sqs.Client) {
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		b.Fatal(err)
	}
	p, err := latency.Start(u.Host)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	c, err := srv.NewClient(b.Context(), func(o *sqs.Options) { o.BaseEndpoint = aws.String("http://" + p.Addr()) })
	if err != nil {
		b.Fatal(err)
	}
	return p, c
}

// benchSide is what measure found: the rate, the CPU time per message, and the relay's senders
// at the end.
type benchSide struct {
	rate    float64
	cpu     cpuPerMessage
	senders int
}

// measure runs side on a fresh queue for n messages, returning its rate and CPU cost.
func measure(b *testing.B, bn *bundle, n int, side func(*testing.B, *bundle, string, int, *stopwatch)) benchSide {
	q := srv.CreateQueue(b, sqstest.QueueOptions{Prefix: "bench"})
	sw := &stopwatch{b: b, bn: bn}
	side(b, bn, q.URL, n, sw)
	s := benchSide{rate: float64(n) / sw.took.Seconds(), senders: sw.senders}
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
	senders    int // the relay's, at the end
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
