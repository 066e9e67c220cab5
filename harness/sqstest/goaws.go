package sqstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// GoAwsVersion is the GoAws version the harness builds.
const GoAwsVersion = "v0.5.4"

var buildMu sync.Mutex

// goawsBinary returns the cached GoAws binary, building it first if needed.
func goawsBinary(ctx context.Context) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "sqsinbox", "goaws-"+GoAwsVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	// Build to a temporary name and rename, so concurrent test binaries never run half a file.
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-C", filepath.Join(root, "harness", "tools", "goaws"),
		"-o", tmp, "github.com/Admiral-Piett/goaws/app/cmd")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startGoAws builds GoAws if needed and starts it on a free loopback port.
func startGoAws(ctx context.Context) (*Server, error) {
	bin, err := goawsBinary(ctx)
	if err != nil {
		return nil, fmt.Errorf("GoAws %s could not be built: %w", GoAwsVersion, err)
	}
	var lastErr error
	for range 3 { // the free port can be taken between the probe and GoAws's listen
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := tryGoAws(ctx, bin, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("GoAws %s could not be started: %w", GoAwsVersion, lastErr)
}

func tryGoAws(ctx context.Context, bin string, port int) (*Server, error) {
	dir, err := os.MkdirTemp("", "sqstest-goaws-")
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`Test:
  Host: 127.0.0.1
  Port: "%d"
  Region: us-east-1
  AccountId: "000000000000"
  LogToFile: false
  EnableDuplicates: true
  QueueAttributeDefaults:
    VisibilityTimeout: 30
    ReceiveMessageWaitTimeSeconds: 0
    MaximumMessageSize: 262144
  Queues: []
  Topics: []
`, port)
	cfgPath := filepath.Join(dir, "goaws.yaml")
	if err := os.WriteFile(cfgPath, []byte(conf), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Kind: KindGoAws, GoAws: true, dir: dir}
	cmd := exec.Command(bin, "-config", cfgPath, "-loglevel", "warn", "Test")
	cmd.Dir = dir
	if err := s.launch(cmd); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	ep := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := s.waitReady(ctx, func() string { return ep }); err != nil {
		return nil, err
	}
	return s, nil
}
