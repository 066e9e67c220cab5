package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// The tests run the command as `make dev` does, in a process of its own (this test binary running
// main, so under -race), on free ports rather than 4566 and 5434, and with a data directory of the
// test's, so that they never meet a developer's `make dev` or LocalStack. The command starts
// fauxqs (sqstest's pinned install) and, unless DATABASE_URL is given, a PostgreSQL cluster whose
// data it keeps (pgtest.StartKept).

// envRunMain makes the test binary run main instead of the tests.
const envRunMain = "DEV_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDevFirstWorker follows README.md's "Running it locally" on fauxqs and PostgreSQL, both
// started by the command: it starts the command, waits for the environment it prints, runs
// `firstworker migrate` (pick_tasks), runs examples/firstworker (built) with that environment and
// QUEUE_URL, sends an OrderPaid twice with the printed `sqsinbox send` line (the CLI built) and
// publishes another to the topic order-paid, and waits for one pick task per order and the
// published event in loyalty's queue. SIGTERM then stops the worker and the command, each with
// exit status 0, and fauxqs is gone; the cluster's directory is kept. A second start with the same
// directory and port prints the same DATABASE_URL, and the pick tasks are still there.
func TestDevFirstWorker(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./examples/firstworker", "./cmd/sqsinbox")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	port, pg := freePort(t), ownPG(t)
	dev := startDev(t, port, pg)
	m := regexp.MustCompile(`a cluster kept in (\S+) `).FindStringSubmatch(dev.out.String())
	if m == nil || m[1] != pg.dir {
		t.Fatalf("the command names no cluster kept in %s:\n%s", pg.dir, dev.out.String())
	}
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL",
		"WAREHOUSE_QUEUE_URL", "LOYALTY_QUEUE_URL", "PAYMENTS_QUEUE_URL", "PAYMENTS_LEDGER_QUEUE_URL", "ORDER_PAID_TOPIC_ARN"} {
		if dev.env[k] == "" {
			t.Errorf("the command exports no %s:\n%s", k, dev.out.String())
		}
	}
	if want := fmt.Sprintf("http://127.0.0.1:%d", port); dev.env["AWS_ENDPOINT_URL"] != want {
		t.Errorf("AWS_ENDPOINT_URL=%s, want %s", dev.env["AWS_ENDPOINT_URL"], want)
	}

	pool, err := pgxpool.New(t.Context(), dev.env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	migrate := exec.CommandContext(t.Context(), filepath.Join(bin, "firstworker"), "migrate") // migrateFirstWorker
	migrate.Env = dev.environ()
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("firstworker migrate: %v\n%s", err, out)
	}

	worker := startProcess(t, append(dev.environ(), "QUEUE_URL="+dev.env["WAREHOUSE_QUEUE_URL"]), filepath.Join(bin, "firstworker"))
	sqsinbox := filepath.Join(bin, "sqsinbox")
	send := strings.Replace(sendExample, "go run ./cmd/sqsinbox", sqsinbox, 1)
	for _, line := range []string{
		send, send, // a duplicate
		`echo '{"id":"evt_2","order_id":"o-2"}' | ` + sqsinbox + ` send --topic-arn "$ORDER_PAID_TOPIC_ARN"`,
	} {
		cmd := exec.CommandContext(t.Context(), "sh", "-c", line)
		cmd.Env = dev.environ()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}

	sqsClient := sqs.NewFromConfig(dev.awsConfig(), func(o *sqs.Options) { o.BaseEndpoint = aws.String(dev.env["AWS_ENDPOINT_URL"]) })
	count := func(order string) int {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pick_tasks WHERE order_id = $1`, order).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	sqstest.WaitFor(t, time.Minute, "a pick task for o-1 (sent) and o-2 (published), and evt_2 in loyalty's queue", func() (bool, string) {
		n, err := sqstest.Count(t.Context(), sqsClient, dev.env["LOYALTY_QUEUE_URL"])
		if err != nil {
			return false, err.Error()
		}
		return count("o-1") == 1 && count("o-2") == 1 && n == 1,
			fmt.Sprintf("pick tasks o-1 %d, o-2 %d; loyalty's queue %d; the worker's output:\n%s", count("o-1"), count("o-2"), n, worker.out.String())
	})
	pool.Close()

	worker.stop(t)
	dev.stop(t)
	for what, p := range map[string]int{"fauxqs": port, "PostgreSQL": pg.port} {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second); err == nil {
			c.Close()
			t.Errorf("%s still listens on port %d after the command stopped", what, p)
		}
	}
	if _, err := os.Stat(filepath.Join(pg.dir, "data", "PG_VERSION")); err != nil {
		t.Errorf("the cluster's data is gone after the command stopped: %v", err)
	}

	again := startDev(t, freePort(t), pg)
	if again.env["DATABASE_URL"] != dev.env["DATABASE_URL"] {
		t.Errorf("the second start exports DATABASE_URL=%s, the first %s", again.env["DATABASE_URL"], dev.env["DATABASE_URL"])
	}
	pool, err = pgxpool.New(t.Context(), again.env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if count("o-1") != 1 || count("o-2") != 1 {
		t.Errorf("after a restart, pick tasks o-1 %d and o-2 %d; want the 1 each written before", count("o-1"), count("o-2"))
	}
	pool.Close()
	again.stop(t)
}

// ownPGOptions are where the command's own PostgreSQL listens and keeps its data in a test.
type ownPGOptions struct {
	port int
	dir  string
}

// ownPG returns a free port and a data directory of t's for the command's own PostgreSQL. The
// directory is open to others: when the tests run as root, PostgreSQL runs as the postgres user,
// who cannot reach t.TempDir().
func ownPG(t *testing.T) ownPGOptions {
	t.Helper()
	dir, err := os.MkdirTemp("", "sqsinbox-devtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return ownPGOptions{port: freePort(t), dir: filepath.Join(dir, "pg")}
}

// TestDevDatabaseURL runs the command with DATABASE_URL naming a database of pgtest's
// (TEST_DATABASE_URL, or a throwaway cluster of the test's) and checks, on the fauxqs it starts,
// every attribute of the queues, their DLQs, the topic and its subscriptions against the table
// of resources.go, and that it migrated the inbox and the outbox. SIGTERM stops it with exit status 0, and the
// database, not the command's, still answers.
func TestDevDatabaseURL(t *testing.T) {
	t.Parallel()
	db, err := pgtest.Start(t.Context(), "devtest")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mine := []string{"orders", "billing.fifo"}
	dev := startDev(t, freePort(t), ownPG(t), append([]string{"DATABASE_URL=" + db.URL}, queueArgs(mine)...)...)
	if dev.env["DATABASE_URL"] != db.URL {
		t.Errorf("the command exports DATABASE_URL=%s, want the one it was given, %s", dev.env["DATABASE_URL"], db.URL)
	}
	if strings.Contains(dev.out.String(), "throwaway") {
		t.Errorf("the command started a throwaway cluster though DATABASE_URL was set:\n%s", dev.out.String())
	}

	ctx := t.Context()
	cfg := dev.awsConfig()
	ep := aws.String(dev.env["AWS_ENDPOINT_URL"])
	c := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = ep })
	attrs := func(url string) map[string]string {
		out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes
	}
	queueARNs := map[string]string{}
	for _, name := range append(slices.Clone(queueNames), mine...) {
		url := dev.env[envName(name, "_QUEUE_URL")]
		if url == "" {
			t.Errorf("the command exports no %s", envName(name, "_QUEUE_URL"))
			continue
		}
		a := attrs(url)
		queueARNs[name] = a["QueueArn"]
		dlq, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(dlqName(name))})
		if err != nil {
			t.Fatalf("the DLQ of %s: %v", name, err)
		}
		d := attrs(aws.ToString(dlq.QueueUrl))
		for k, want := range map[string]string{
			"MessageRetentionPeriod":        strconv.Itoa(seconds(retention)),
			"VisibilityTimeout":             strconv.Itoa(seconds(visibility)),
			"ReceiveMessageWaitTimeSeconds": strconv.Itoa(seconds(receiveWait)),
		} {
			if a[k] != want {
				t.Errorf("queue %s: %s is %q, want %s", name, k, a[k], want)
			}
		}
		if got, want := d["MessageRetentionPeriod"], strconv.Itoa(seconds(dlqRetention)); got != want {
			t.Errorf("queue %s: MessageRetentionPeriod is %q, want %s", dlqName(name), got, want)
		}
		if fifo := strings.HasSuffix(name, ".fifo"); (a["FifoQueue"] == "true") != fifo || (d["FifoQueue"] == "true") != fifo {
			t.Errorf("queue %s: FifoQueue is %q, its DLQ's %q; want both FIFO: %t", name, a["FifoQueue"], d["FifoQueue"], fifo)
		}
		jsonEqual(t, name+"'s RedrivePolicy", a["RedrivePolicy"], map[string]any{"deadLetterTargetArn": d["QueueArn"], "maxReceiveCount": maxReceiveCount})
		jsonEqual(t, dlqName(name)+"'s RedriveAllowPolicy", d["RedriveAllowPolicy"], map[string]any{"redrivePermission": "byQueue", "sourceQueueArns": []string{a["QueueArn"]}})
	}

	snsClient := sns.NewFromConfig(cfg, func(o *sns.Options) { o.BaseEndpoint = ep })
	topicARN := dev.env[envName(topicName, "_TOPIC_ARN")]
	if !strings.HasSuffix(topicARN, ":"+topicName) {
		t.Errorf("ORDER_PAID_TOPIC_ARN=%s does not name the topic %s", topicARN, topicName)
	}
	subs, err := snsClient.ListSubscriptionsByTopic(ctx, &sns.ListSubscriptionsByTopicInput{TopicArn: aws.String(topicARN)})
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]string{}
	for _, s := range subs.Subscriptions {
		sa, err := snsClient.GetSubscriptionAttributes(ctx, &sns.GetSubscriptionAttributesInput{SubscriptionArn: s.SubscriptionArn})
		if err != nil {
			t.Fatal(err)
		}
		raw[aws.ToString(s.Endpoint)] = sa.Attributes["RawMessageDelivery"]
	}
	if len(raw) != len(subscriptions) {
		t.Errorf("the topic has the subscriptions %v, want %d", raw, len(subscriptions))
	}
	for _, s := range subscriptions {
		if got := raw[queueARNs[s.queue]]; got != strconv.FormatBool(s.raw) {
			t.Errorf("%s's subscription: RawMessageDelivery is %q, want %t", s.queue, got, s.raw)
		}
		jsonEqual(t, s.queue+"'s Policy", attrs(dev.env[envName(s.queue, "_QUEUE_URL")])["Policy"], sqstest.TopicQueuePolicy(topicARN, queueARNs[s.queue]))
	}

	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st, err := inbox.Migrations(ctx, pool, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st {
		if m.AppliedAt.IsZero() {
			t.Errorf("inbox migration %d (%s) is not applied", m.Version, m.Name)
		}
	}
	// The outbox's too: the console's outbox panel reads its table.
	ost, err := outbox.Migrations(ctx, pool, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ost {
		if m.AppliedAt.IsZero() {
			t.Errorf("outbox migration %d (%s) is not applied", m.Version, m.Name)
		}
	}

	dev.stop(t)
	if err := pool.Ping(ctx); err != nil {
		t.Errorf("the database DATABASE_URL names does not answer after the command stopped: %v", err)
	}
}

// TestDevRefuses runs the command where it must refuse, with exit status 1 and a message naming
// why: its port taken (no server is started), a queue name SQS would refuse, one given twice, and
// two that would be exported under one name (nothing is started), a DATABASE_URL that does not
// answer, and its PostgreSQL's port taken (fauxqs is started, then stopped).
func TestDevRefuses(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = taken.Close() }) // after the parallel subtests, unlike a defer
	takenPort := taken.Addr().(*net.TCPAddr).Port
	closed := freePort(t) // nothing listens there
	for _, c := range []struct {
		name string
		port int
		env  []string
		want string
	}{
		{"port taken", takenPort, nil, fmt.Sprintf("127.0.0.1:%d is taken", takenPort)},
		{"database does not answer", freePort(t), []string{fmt.Sprintf("DATABASE_URL=postgres://app@127.0.0.1:%d/app?sslmode=disable&connect_timeout=5", closed)},
			"connecting to PostgreSQL (the database DATABASE_URL names)"},
		{"PostgreSQL's port taken", freePort(t), []string{fmt.Sprintf("-pgport=%d", takenPort)},
			fmt.Sprintf("127.0.0.1:%d is taken", takenPort)},
		{"bad queue name", freePort(t), queueArgs([]string{"orders:eu"}), `-queue "orders:eu": a queue name is A-Z`},
		{"queue given twice", freePort(t), queueArgs([]string{"warehouse"}), `-queue "warehouse": given twice, or one of the command's own queues`},
		{"same exported name", freePort(t), queueArgs([]string{"a-b", "a_b"}), `would both be exported as A_B_QUEUE_URL`},
		{"a DLQ's name", freePort(t), queueArgs([]string{"orders-dlq"}), `names ending in -dlq are the DLQs`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			args, env := devArgs(c.port, ownPG(t), c.env)
			cmd := exec.CommandContext(ctx, os.Args[0], args...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
				t.Fatalf("the command: %v, want exit status 1; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Errorf("the output does not say %q:\n%s", c.want, out)
			}
			if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.port), time.Second); err == nil && c.port != takenPort {
				conn.Close()
				t.Errorf("fauxqs still listens on port %d after the command exited", c.port)
			}
		})
	}
}

// process is a command the tests run and stop.
type process struct {
	cmd  *exec.Cmd
	out  sqstest.Buffer // stdout and stderr
	done chan struct{}  // closed once it has exited; err is then its Wait error
	err  error
}

// startProcess starts name with the environment env; it is killed when t ends if still running.
func startProcess(t *testing.T, env []string, name string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// stop sends SIGTERM and fails t unless the process exits with status 0 within a minute.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: %v", p.cmd.Path, err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("%s had not exited a minute after SIGTERM; output:\n%s", filepath.Base(p.cmd.Path), p.out.String())
	}
	if p.err != nil {
		t.Fatalf("%s after SIGTERM: %v, want exit status 0; output:\n%s", filepath.Base(p.cmd.Path), p.err, p.out.String())
	}
}

// devProcess is the command, running, and the environment it printed.
type devProcess struct {
	*process
	env map[string]string // the printed export lines
}

// startDev starts the command with fauxqs on port and its own PostgreSQL as pg says, with this
// process's environment, less DATABASE_URL and the AWS variables, plus env (those of its words
// that begin with "-" are flags), and waits until it prints that it runs.
func startDev(t *testing.T, port int, pg ownPGOptions, env ...string) *devProcess {
	t.Helper()
	args, vars := devArgs(port, pg, env)
	d := &devProcess{process: startProcess(t, vars, os.Args[0], args...)}
	// Long enough for fauxqs's first install (npm ci, about 10 s; 70 s of retries when the
	// registry is out of reach) and a cluster's initdb on a busy machine.
	sqstest.WaitFor(t, 5*time.Minute, "the command to print that it runs", func() (bool, string) {
		select {
		case <-d.done:
			t.Fatalf("the command exited (%v) before it ran; output:\n%s", d.err, d.out.String())
		default:
		}
		return strings.Contains(d.out.String(), readyLine), d.out.String()
	})
	d.env = map[string]string{}
	for _, line := range strings.Split(d.out.String(), "\n") {
		if kv, ok := strings.CutPrefix(line, "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			d.env[k] = shellUnquote(t, v)
		}
	}
	return d
}

// environ returns the environment of a process started in the terminal where the printed
// variables were exported.
func (d *devProcess) environ() []string {
	env := cleanEnv()
	for k, v := range d.env {
		env = append(env, k+"="+v)
	}
	return env
}

// awsConfig returns the printed region and credentials; the clients made from it take the
// printed endpoint as their BaseEndpoint.
func (d *devProcess) awsConfig() aws.Config {
	return aws.Config{Region: d.env["AWS_REGION"],
		Credentials: credentials.NewStaticCredentialsProvider(d.env["AWS_ACCESS_KEY_ID"], d.env["AWS_SECRET_ACCESS_KEY"], "")}
}

// cleanEnv returns this process's environment without DATABASE_URL and the AWS variables, as in a
// new terminal that has not exported the command's environment.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "DATABASE_URL" && !strings.HasPrefix(k, "AWS_") {
			env = append(env, kv)
		}
	}
	return env
}

// shellUnquote undoes shellQuote.
func shellUnquote(t *testing.T, v string) string {
	t.Helper()
	if !strings.HasPrefix(v, "'") {
		return v
	}
	if !strings.HasSuffix(v, "'") || len(v) < 2 {
		t.Fatalf("unbalanced quotes: %s", v)
	}
	return strings.ReplaceAll(v[1:len(v)-1], `'\''`, "'")
}

// devArgs returns the command's arguments, with fauxqs on port and its own PostgreSQL as pg says,
// and its environment: this process's, less DATABASE_URL and the AWS variables, plus extra, whose
// words that begin with "-" are flags instead.
func devArgs(port int, pg ownPGOptions, extra []string) (args, env []string) {
	args = []string{"-port", strconv.Itoa(port), "-pgport", strconv.Itoa(pg.port), "-pgdata", pg.dir}
	env = append(cleanEnv(), envRunMain+"=1")
	for _, e := range extra {
		if strings.HasPrefix(e, "-") {
			args = append(args, e)
		} else {
			env = append(env, e)
		}
	}
	return args, env
}

// queueArgs returns the flags that name the queues.
func queueArgs(names []string) []string {
	var args []string
	for _, n := range names {
		args = append(args, "-queue="+n)
	}
	return args
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// jsonEqual fails t unless got, a JSON document, decodes to the same value as want encoded.
func jsonEqual(t *testing.T, what, got string, want any) {
	t.Helper()
	b, _ := json.Marshal(want)
	var g, w any
	_ = json.Unmarshal(b, &w)
	if err := json.Unmarshal([]byte(got), &g); err != nil || !reflect.DeepEqual(g, w) {
		t.Errorf("%s is %s, want %s", what, got, b)
	}
}
