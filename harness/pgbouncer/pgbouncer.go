// Package pgbouncer starts a real PgBouncer in front of a harness/pgtest PostgreSQL, so that tests
// can run the code the way production runs it: behind a pooler in transaction mode, where a
// client's transactions may each run on a different server connection and a statement outside a
// transaction is a transaction of its own.
//
// It uses Debian's `pgbouncer` package (1.18 at the time of writing), which the harness does not
// install: when the binary is missing, Start fails with a message naming
// `apt-get install pgbouncer`. Tests never skip for want of it. The pooler listens on a free port of
// 127.0.0.1, accepts any user without a password (auth_type any) and logs in to the server as the
// user of the pgtest server's admin URL. It runs in the foreground as a child of the test binary
// (as the postgres user when the test runs as root, since PgBouncer refuses to run as root), with a
// temporary directory that user owns, and the kernel kills it when the test binary dies.
//
// PgBouncer 1.18 keeps no protocol-level prepared statements (they arrived in 1.21), and it refuses
// a start-up parameter it does not track unless told to ignore it. It ignores extra_float_digits
// only: a search_path in the URL is refused rather than dropped without a word, so tests through the
// pooler name their schema in the configuration they pass, as users behind a pooler must.
package pgbouncer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
)

// DefaultPoolMode is the pool_mode Start uses when Config.PoolMode is empty.
const DefaultPoolMode = "transaction"

// DefaultPoolSize is PgBouncer's own default_pool_size: server connections per database and user.
const DefaultPoolSize = 20

// DefaultMaxClientConn is the max_client_conn Start uses when Config.MaxClientConn is 0.
const DefaultMaxClientConn = 1000

// startTimeout bounds how long PgBouncer may take to accept a connection after it is started.
const startTimeout = 30 * time.Second

// InstallHint is what the error of a missing binary tells the user to do.
const InstallHint = "install Debian's PgBouncer: `apt-get install pgbouncer` (the package starts nothing by itself)"

// ErrNotInstalled is returned (wrapped) by Start when no pgbouncer binary can be found.
var ErrNotInstalled = errors.New("pgbouncer: the pgbouncer binary was found neither on PATH nor in /usr/sbin; " + InstallHint)

// Config says how to run the pooler. The zero value (or nil) is transaction mode with PgBouncer's
// default pool size.
type Config struct {
	// PoolMode is PgBouncer's pool_mode: "transaction", "session" or "statement". Empty means
	// DefaultPoolMode (transaction).
	PoolMode string
	// DefaultPoolSize is the number of server connections per database and user. 0 means
	// DefaultPoolSize (20); negative is an error.
	DefaultPoolSize int
	// MaxClientConn is the number of client connections the pooler accepts. 0 means
	// DefaultMaxClientConn (1000); negative is an error.
	MaxClientConn int
	// Binary is the path of the pgbouncer binary. Empty means `pgbouncer` on PATH, then
	// /usr/sbin/pgbouncer (where Debian puts it, off a normal user's PATH).
	Binary string
}

func (c *Config) validate() error {
	switch c.PoolMode {
	case "transaction", "session", "statement":
	default:
		return fmt.Errorf("pgbouncer: Config.PoolMode %q must be transaction, session or statement", c.PoolMode)
	}
	if c.DefaultPoolSize < 0 {
		return fmt.Errorf("pgbouncer: Config.DefaultPoolSize %d must not be negative", c.DefaultPoolSize)
	}
	if c.MaxClientConn < 0 {
		return fmt.Errorf("pgbouncer: Config.MaxClientConn %d must not be negative", c.MaxClientConn)
	}
	return nil
}

// Bouncer is a running PgBouncer in front of one PostgreSQL server.
type Bouncer struct {
	// URL is the test database's connection string through the pooler (the pgtest server's URL
	// with the pooler's address).
	URL string
	// AdminURL is the connection string of PgBouncer's admin console (database "pgbouncer"), in
	// simple protocol, which the console requires.
	AdminURL string
	// Port is the pooler's TCP port on 127.0.0.1.
	Port int
	// Config is the configuration the pooler runs with, defaults filled in.
	Config Config

	dir    string
	cmd    *exec.Cmd
	output bytes.Buffer // guarded by mu
	mu     sync.Mutex
	exited chan struct{}
	closed bool
}

// Start starts PgBouncer in front of db. The caller must call Close.
func Start(ctx context.Context, db *pgtest.Server, cfg *Config) (*Bouncer, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.PoolMode = cmp.Or(c.PoolMode, DefaultPoolMode)
	c.DefaultPoolSize = cmp.Or(c.DefaultPoolSize, DefaultPoolSize)
	c.MaxClientConn = cmp.Or(c.MaxClientConn, DefaultMaxClientConn)
	if err := c.validate(); err != nil {
		return nil, err
	}
	bin, err := binary(c.Binary)
	if err != nil {
		return nil, err
	}
	server, err := url.Parse(db.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: the server's admin URL: %w", err)
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sqsinbox-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
	}
	b := &Bouncer{Config: c, dir: dir}
	// A port can be taken between choosing and binding it; try a few.
	for range 5 {
		if b.Port, err = freePort(); err != nil {
			break
		}
		if err = b.start(ctx, bin, server, cred); err == nil {
			break
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	u, err := url.Parse(db.URL)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("pgbouncer: the server's URL: %w", err)
	}
	u.Host = "127.0.0.1:" + strconv.Itoa(b.Port)
	b.URL = u.String()
	return b, nil
}

// start writes the configuration for b.Port, starts the pooler and waits until it accepts a
// connection to its admin console.
func (b *Bouncer) start(ctx context.Context, bin string, server *url.URL, cred *syscall.Credential) error {
	ini := filepath.Join(b.dir, "pgbouncer.ini")
	if err := os.WriteFile(ini, []byte(b.ini(server)), 0o644); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	b.AdminURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", b.Port)
	b.mu.Lock()
	b.output.Reset()
	b.mu.Unlock()
	cmd := exec.Command(bin, ini)
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = b, b
	cmd.SysProcAttr = procAttr(cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgbouncer: start %s: %w", bin, err)
	}
	b.cmd = cmd
	b.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(b.exited)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, b.AdminURL)
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("pgbouncer: exited at start: %s", b.Output())
		case <-ctx.Done():
			b.kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.kill()
			return fmt.Errorf("pgbouncer: accepted no connection within %v (last error: %w): %s", startTimeout, err, b.Output())
		}
	}
}

// ini returns the pooler's configuration: every database name goes to the same server, logged in
// as the admin URL's user.
func (b *Bouncer) ini(server *url.URL) string {
	host, port := server.Hostname(), cmp.Or(server.Port(), "5432")
	target := fmt.Sprintf("host=%s port=%s user=%s", host, port, cmp.Or(server.User.Username(), "postgres"))
	if pw, ok := server.User.Password(); ok {
		target += " password=" + pw
	}
	return strings.Join([]string{
		"[databases]",
		"* = " + target,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(b.Port),
		"unix_socket_dir =",
		"auth_type = any",
		"admin_users = postgres",
		"stats_users = postgres",
		"pool_mode = " + b.Config.PoolMode,
		"default_pool_size = " + strconv.Itoa(b.Config.DefaultPoolSize),
		"max_client_conn = " + strconv.Itoa(b.Config.MaxClientConn),
		"ignore_startup_parameters = extra_float_digits",
		"log_connections = 0",
		"log_disconnections = 0",
		"logfile =",
		"pidfile =",
	}, "\n") + "\n"
}

// Write keeps the pooler's output (its log), for Output.
func (b *Bouncer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.output.Write(p)
}

// Output returns the end of what the pooler has logged.
func (b *Bouncer) Output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.output.Bytes()
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}

// Alive reports whether the pooler's process is still running.
func (b *Bouncer) Alive() bool {
	if b.cmd == nil {
		return false
	}
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// Close stops the pooler and removes its directory. It may be called more than once.
func (b *Bouncer) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	b.kill()
	_ = os.RemoveAll(b.dir)
}

func (b *Bouncer) kill() {
	if b.cmd == nil {
		return
	}
	select {
	case <-b.exited:
	default:
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	b.cmd = nil
}

// Pool is one line of PgBouncer's SHOW POOLS: a database and user pair's clients and server
// connections.
type Pool struct {
	Database, User string
	// ClientsActive and ClientsWaiting are the client connections linked to a server connection
	// (or idle) and those waiting for one.
	ClientsActive, ClientsWaiting int
	// ServersActive, ServersIdle, ServersUsed, ServersTested and ServersLogin are the server
	// connections in each of PgBouncer's states.
	ServersActive, ServersIdle, ServersUsed, ServersTested, ServersLogin int
	// MaxWait is the longest time a client in the pool has waited, in seconds.
	MaxWait int
}

// Servers returns the pool's server connections, whatever their state.
func (p Pool) Servers() int {
	return p.ServersActive + p.ServersIdle + p.ServersUsed + p.ServersTested + p.ServersLogin
}

// Pools returns PgBouncer's SHOW POOLS, without the admin console's own line.
func (b *Bouncer) Pools(ctx context.Context) ([]Pool, error) {
	conn, err := pgx.Connect(ctx, b.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: admin console: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	res, err := conn.PgConn().Exec(ctx, "SHOW POOLS").ReadAll()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: SHOW POOLS: %w", err)
	}
	var pools []Pool
	for _, r := range res {
		col := map[string]int{}
		for i, f := range r.FieldDescriptions {
			col[f.Name] = i
		}
		for _, row := range r.Rows {
			text := func(name string) string {
				if i, ok := col[name]; ok && row[i] != nil {
					return string(row[i])
				}
				return ""
			}
			num := func(name string) int { n, _ := strconv.Atoi(text(name)); return n }
			p := Pool{
				Database: text("database"), User: text("user"),
				ClientsActive: num("cl_active"), ClientsWaiting: num("cl_waiting"),
				ServersActive: num("sv_active"), ServersIdle: num("sv_idle"), ServersUsed: num("sv_used"),
				ServersTested: num("sv_tested"), ServersLogin: num("sv_login"),
				MaxWait: num("maxwait"),
			}
			if p.Database != "pgbouncer" {
				pools = append(pools, p)
			}
		}
	}
	return pools, nil
}

// ServerConns returns how many server connections the pooler holds to PostgreSQL, over every pool.
func (b *Bouncer) ServerConns(ctx context.Context) (int, error) {
	pools, err := b.Pools(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pools {
		n += p.Servers()
	}
	return n, nil
}

func binary(path string) (string, error) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("%w (Config.Binary %q: %w)", ErrNotInstalled, path, err)
		}
		return path, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNotInstalled
}

// credential returns the postgres user's credential when the process is root (PgBouncer refuses
// to run as root), else nil.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: running as root and there is no postgres user to run PgBouncer as "+
			"(it refuses to run as root; the postgresql and pgbouncer packages create that user): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
