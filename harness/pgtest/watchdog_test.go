package pgtest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const envChild = "PGTEST_WATCHDOG_CHILD"

// TestKilledOwnerLeavesNoCluster starts a throwaway cluster (real PostgreSQL, from the local
// binaries) in a child process, kills the child with SIGKILL so that nothing of its own runs,
// and waits for the watchdog to stop the cluster and remove its directory.
func TestKilledOwnerLeavesNoCluster(t *testing.T) {
	if os.Getenv(envChild) != "" {
		s, err := StartOwned(context.Background(), "watchdog")
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Printf("cluster %d %s\n", s.Port(), s.cluster.dir)
		select {} // until killed
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKilledOwnerLeavesNoCluster$")
	cmd.Env = append(os.Environ(), envChild+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var port int
	var dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "cluster %d %s", &port, &dir); err == nil {
			break
		}
		if strings.HasPrefix(sc.Text(), "error:") {
			t.Fatal(sc.Text())
		}
	}
	if port == 0 {
		t.Fatal("the child printed no cluster")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
		t.Fatalf("the child's cluster does not accept connections: %v", err)
	} else {
		c.Close()
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, statErr := os.Stat(dir)
		c, dialErr := net.DialTimeout("tcp", addr, time.Second)
		if dialErr == nil {
			c.Close()
		}
		if dialErr != nil && os.IsNotExist(statErr) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after its owner was killed, the cluster still runs (dial: %v) or its directory %s remains (stat: %v)", dialErr, dir, statErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
