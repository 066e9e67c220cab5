package sqstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"
)

// startTimeout bounds how long a server the harness starts may take to answer GET /health.
const startTimeout = 30 * time.Second

// launch starts cmd as the server's process: its stdout and stderr go to s.output, the kernel
// kills it when the test binary dies (see procAttr), and s.exited is closed once it has exited.
func (s *Server) launch(cmd *exec.Cmd) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return err
	}
	_ = w.Close() // the child holds its own copy; the read end sees EOF when the child exits
	s.cmd = cmd
	s.exited = make(chan struct{})
	go s.wait(r)
	return nil
}

// wait copies the server's output until the pipe closes, which happens when the server exits,
// then reaps it. While the server runs, this goroutine is parked in a read of the pipe
// (internal/poll.runtime_pollWait), which the test packages' goleak checks already ignore.
func (s *Server) wait(r *os.File) {
	_, _ = io.Copy(&s.output, r)
	_ = r.Close()
	_ = s.cmd.Wait()
	close(s.exited)
}

// waitReady polls until endpoint returns a base URL whose GET /health answers 200, the server
// exits, ctx ends or startTimeout passes. endpoint returns "" while the address is not known yet.
// On failure the server is stopped and the error carries the end of its output.
func (s *Server) waitReady(ctx context.Context, endpoint func() string) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if ep := endpoint(); ep != "" {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep+"/health", nil)
			if err != nil {
				s.stop()
				return err
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					s.Endpoint = ep
					return nil
				}
			}
		}
		select {
		case <-s.exited:
			s.stop()
			return fmt.Errorf("%s exited at start: %s", s.Kind, tail(s.output.String(), 2000))
		case <-ctx.Done():
			s.stop()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("%s did not answer GET /health within %v: %s", s.Kind, startTimeout, tail(s.output.String(), 2000))
		}
	}
}

// stop kills the server's process, waits for it and removes its directory. It reports whether
// the process had already exited on its own.
func (s *Server) stop() (crashed bool) {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		crashed = true
	default:
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
	s.cmd = nil
	return crashed
}
