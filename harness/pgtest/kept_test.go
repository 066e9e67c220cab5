package pgtest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStartKept (real PostgreSQL, from the local binaries): a kept cluster keeps its data and
// its URL across Close and StartKept; a second StartKept on data a server already runs on is
// refused, and so is a port something else listens on (ErrPortTaken).
func TestStartKept(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// Open to others: as root, PostgreSQL runs as the postgres user, who cannot reach t.TempDir().
	top, err := os.MkdirTemp("", "pgtest-kept-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, port := filepath.Join(top, "pg"), mustFreePort(t)

	s, err := StartKept(ctx, dir, port, "kept")
	if err != nil {
		t.Fatal(err)
	}
	url := s.URL
	exec := func(s *Server, sql string) error {
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(s, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		s.Close()
		t.Fatal(err)
	}
	_, err = StartKept(ctx, dir, mustFreePort(t), "kept")
	if err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Errorf("a second StartKept on running data: %v, want a refusal", err)
	}
	s.Close()

	s, err = StartKept(ctx, dir, port, "kept")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.URL != url {
		t.Errorf("the URL after a restart is %s, was %s", s.URL, url)
	}
	if err := exec(s, "DO $$ BEGIN IF (SELECT v FROM kept) <> 42 THEN RAISE 'lost'; END IF; END $$"); err != nil {
		t.Errorf("the row written before the restart: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = StartKept(ctx, filepath.Join(top, "other"), l.Addr().(*net.TCPAddr).Port, "kept")
	if !errors.Is(err, ErrPortTaken) {
		t.Errorf("StartKept on a taken port: %v, want ErrPortTaken", err)
	}
}

func mustFreePort(t *testing.T) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
