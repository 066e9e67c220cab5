// Package pgtest gives every test package of sqsinbox a real PostgreSQL database of its own.
//
// When TEST_DATABASE_URL is set, Start creates a fresh database on that server for the calling
// test binary and drops it afterwards; it changes nothing else on the server. Otherwise it starts a
// throwaway cluster from the local PostgreSQL binaries (initdb and pg_ctl in a temporary
// directory, on a free port, run as the postgres user when the process is root) and stops it
// afterwards. Only a throwaway cluster can be restarted or killed by fault tests.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
)

// EnvURL names the environment variable that points the tests at an existing server.
const EnvURL = "TEST_DATABASE_URL"

// DockerHint is the alternative the harness names when it can neither use TEST_DATABASE_URL nor
// start a cluster of its own: a server that `make dev` or Docker runs.
const DockerHint = "point TEST_DATABASE_URL at a server that can create databases: with `make dev` running, " +
	"TEST_DATABASE_URL=$DATABASE_URL (the URL it prints); or start one with " +
	"`docker compose -f localstack/docker-compose.yml up -d --wait` and set " +
	"TEST_DATABASE_URL=postgres://sqsinbox:sqsinbox@127.0.0.1:5433/sqsinbox?sslmode=disable"

// Server is a PostgreSQL server with one database created for the calling test binary.
type Server struct {
	// URL is the connection string of the test database.
	URL string
	// AdminURL is the connection string of the server's maintenance database.
	AdminURL string
	// Database is the name of the test database.
	Database string

	cluster *cluster // nil when the server is not ours
	mu      sync.Mutex
}

// Start returns a server with a fresh database named after prefix. The caller must call Close.
func Start(ctx context.Context, prefix string) (*Server, error) {
	return start(ctx, prefix, os.Getenv(EnvURL))
}

// StartOwned always starts a throwaway cluster, even when TEST_DATABASE_URL is set: fault tests
// that stop, kill and restart PostgreSQL use it, so they never touch a shared server and still
// run beside a suite pointed at one.
func StartOwned(ctx context.Context, prefix string) (*Server, error) {
	return start(ctx, prefix, "")
}

func start(ctx context.Context, prefix, envURL string) (*Server, error) {
	var s Server
	if u := envURL; u != "" {
		s.AdminURL = u
	} else {
		c, err := startCluster(ctx)
		if err != nil {
			return nil, fmt.Errorf("pgtest: a throwaway PostgreSQL could not be started (and %s names no server for this test): %w; "+
				"either install the PostgreSQL server binaries (initdb, pg_ctl) or %s", EnvURL, err, DockerHint)
		}
		s.cluster = c
		s.AdminURL = c.url("postgres")
	}
	s.Database = prefix + "_" + randomSuffix()
	if err := s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{s.Database}.Sanitize()); err != nil {
		s.Close()
		return nil, fmt.Errorf("pgtest: create database %s: %w (%s)", s.Database, err, DockerHint)
	}
	u, err := url.Parse(s.AdminURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		s.Close()
		return nil, fmt.Errorf("pgtest: %s must be a postgres:// URL", EnvURL)
	}
	u.Path = "/" + s.Database
	s.URL = u.String()
	return &s, nil
}

func (s *Server) exec(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.AdminURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// Close drops the test database and stops the throwaway cluster, if there is one.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster != nil && s.cluster.kept {
		_ = s.cluster.stop("fast") // a clean shutdown: the data is used again
		s.cluster.stopWatchdog()
		return
	}
	if s.cluster != nil {
		_ = s.cluster.stop("immediate")
		s.cluster.stopWatchdog()
		_ = os.RemoveAll(s.cluster.dir)
		return
	}
	if s.Database != "" {
		_ = s.exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{s.Database}.Sanitize()+" WITH (FORCE)")
	}
}

// Owned reports whether the server is a throwaway cluster that fault tests may restart.
func (s *Server) Owned() bool { return s.cluster != nil }

// Dir returns the directory that holds the throwaway cluster (its data, its log), which Close
// removes, or "" when the server is not ours.
func (s *Server) Dir() string {
	if s.cluster == nil {
		return ""
	}
	return s.cluster.dir
}

// ErrNotOwned is returned by Restart, Stop and Kill on a server that the harness did not start.
var ErrNotOwned = errors.New("pgtest: the server is not a throwaway cluster (TEST_DATABASE_URL is set); it is never restarted")

// Restart stops the throwaway cluster with the given pg_ctl mode ("fast" or "immediate") and
// starts it again on the same port.
func (s *Server) Restart(mode string) error {
	if err := s.Stop(mode); err != nil {
		return err
	}
	return s.StartAgain()
}

// Stop stops the throwaway cluster with the given pg_ctl mode ("smart", "fast" or "immediate").
func (s *Server) Stop(mode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster == nil {
		return ErrNotOwned
	}
	return s.cluster.stop(mode)
}

// StartAgain starts a cluster stopped by Stop.
func (s *Server) StartAgain() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster == nil {
		return ErrNotOwned
	}
	return s.cluster.start()
}

// PostmasterPid returns the process id of the throwaway cluster's postmaster, or 0 when the
// server is not ours or not running.
func (s *Server) PostmasterPid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster == nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(s.cluster.data(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// Port returns the TCP port of the server.
func (s *Server) Port() int {
	u, err := url.Parse(s.URL)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

type cluster struct {
	bin      string
	dir      string // owned by the cluster's user
	port     int
	cred     *syscall.Credential
	watchdog *exec.Cmd
	kept     bool // StartKept's: stopped, never removed
}

// watchdogScript waits; on SIGTERM (sent by the kernel when the process that started it dies:
// a test binary killed by a timeout or a signal never runs its Close) it stops the cluster and
// removes its directory. $0 is pg_ctl, $1 the data directory, $2 the cluster's directory ("" for
// a kept cluster: nothing is removed).
const watchdogScript = `trap 'kill $s 2>/dev/null; "$0" -D "$1" -m immediate -w stop >/dev/null 2>&1; rm -rf "$2"; exit 0' TERM
while :; do sleep 3600 & s=$!; wait $s; done`

// startWatchdog starts the cluster's watchdog. Without one (no sh), a killed test binary leaves
// the cluster running, as it would anyway.
func (c *cluster) startWatchdog() {
	remove := c.dir
	if c.kept {
		remove = ""
	}
	cmd := exec.Command("sh", "-c", watchdogScript, filepath.Join(c.bin, "pg_ctl"), c.data(), remove)
	cmd.Dir = c.dir
	cmd.SysProcAttr = watchdogAttr(c.cred)
	if cmd.Start() == nil {
		c.watchdog = cmd
	}
}

// stopWatchdog kills the watchdog and its sleep without running its trap.
func (c *cluster) stopWatchdog() {
	if c.watchdog == nil {
		return
	}
	_ = syscall.Kill(-c.watchdog.Process.Pid, syscall.SIGKILL) // its process group
	_ = c.watchdog.Wait()
	c.watchdog = nil
}

func (c *cluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

func startCluster(ctx context.Context) (*cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sqsinbox-pg-")
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin, dir: dir}
	if err := c.own(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := c.initdb(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// A port can be taken between choosing and binding it; try a few.
	for range 5 {
		c.port, err = freePort()
		if err != nil {
			break
		}
		if err = c.start(); err == nil {
			c.startWatchdog()
			return c, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// own makes the cluster's directory its user's: the postgres user when the process is root
// (PostgreSQL refuses to run as root), else the process's.
func (c *cluster) own() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root and there is no postgres user to run initdb as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return os.Chown(c.dir, uid, gid)
}

// initdb creates the cluster's data directory and settings.
func (c *cluster) initdb(ctx context.Context) error {
	if err := c.run(ctx, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		return err
	}
	conf := strings.Join([]string{
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = ''",
		"max_connections = 200",
		"shared_buffers = 128MB",
		"fsync = on",
		"synchronous_commit = on",
		"log_min_messages = warning",
		"logging_collector = off",
	}, "\n") + "\n"
	f, err := os.OpenFile(filepath.Join(c.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(conf)
		f.Close()
	}
	return err
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *cluster) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.run(ctx, "pg_ctl", "-D", c.data(), "-l", filepath.Join(c.dir, "log"), "-w", "-t", "60",
		"-o", "-p "+strconv.Itoa(c.port), "start")
}

func (c *cluster) stop(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.run(ctx, "pg_ctl", "-D", c.data(), "-w", "-t", "60", "-m", mode, "stop")
}

func (c *cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	// pg_ctl start leaves the server running with our stdout unless it is redirected.
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		return fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, out.String(), tail(log, 2000))
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func binDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("initdb not found (neither pg_config --bindir, PATH nor /usr/lib/postgresql/*/bin)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
