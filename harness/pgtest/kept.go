package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrPortTaken is returned by StartKept when something else listens on its port.
var ErrPortTaken = errors.New("pgtest: the port is taken")

// StartKept starts a cluster from the local binaries whose data lives in dir, created with
// initdb when dir holds none yet, listening on 127.0.0.1:port, with a database named db (created
// when missing). Close stops it and keeps the data, so the next StartKept with the same dir,
// port and db gives the same URL and finds what was written: `make dev`'s database. It refuses
// (wrapping ErrPortTaken) when something listens on port, and refuses when a server runs on
// dir's data already. When the process dies without Close, the cluster is stopped for it.
func StartKept(ctx context.Context, dir string, port int, db string) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("%w: 127.0.0.1:%d is taken (%w)", ErrPortTaken, port, err)
	}
	_ = l.Close()
	c := &cluster{bin: bin, dir: dir, port: port, kept: true}
	// Readable parents: the postgres user, when the process is root, must reach dir.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := c.own(); err != nil {
		return nil, err
	}
	if err := c.reachable(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(c.data(), "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := c.initdb(ctx); err != nil {
			return nil, fmt.Errorf("pgtest: initdb in %s: %w", dir, err)
		}
	} else if err != nil {
		return nil, err
	}
	if c.running() {
		return nil, fmt.Errorf("pgtest: a server already runs on the data in %s (another make dev?); stop it first", dir)
	}
	if err := c.start(); err != nil {
		return nil, err
	}
	c.startWatchdog()
	s := &Server{AdminURL: c.url("postgres"), URL: c.url(db), Database: db, cluster: c}
	if err := s.createIfMissing(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// reachable refuses a directory that the cluster's user (the postgres user, when the process is
// root) cannot reach, since a directory above it is closed to others: root's home, say.
func (c *cluster) reachable() error {
	if c.cred == nil {
		return nil
	}
	for p := filepath.Dir(c.dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm()&0o001 == 0 && (!ok || st.Uid != c.cred.Uid) {
			return fmt.Errorf("pgtest: %s is out of the postgres user's reach (PostgreSQL runs as that user when the process is root): %s is closed to others (mode %v); choose a directory elsewhere",
				c.dir, p, fi.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// running reports whether pg_ctl finds a server running on the cluster's data.
func (c *cluster) running() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "pg_ctl"), "status", "-D", c.data())
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd.Run() == nil // 3: not running; 4: no data
}

// createIfMissing creates the server's database unless it exists.
func (s *Server) createIfMissing(ctx context.Context) error {
	err := s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{s.Database}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: made at an earlier start
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", s.Database, err)
	}
	return nil
}
