package sqstest_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const envChild = "SQSTEST_DEATHSIG_CHILD"

// TestServerDiesWithTestBinary starts a server in a child test binary (the kind this run uses:
// SQSINBOX_TEST_SQS), kills the child with SIGKILL so that none of its own code runs, and waits
// for the server to stop answering: the kernel kills it with its parent.
func TestServerDiesWithTestBinary(t *testing.T) {
	if os.Getenv(envChild) != "" {
		fmt.Printf("server %s %d\n", srv.Endpoint, srv.Pid())
		select {} // until killed
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestServerDiesWithTestBinary$")
	for _, kv := range os.Environ() {
		// Without an endpoint, the child's TestMain starts a server of its own.
		if !strings.HasPrefix(kv, "AWS_ENDPOINT_URL_SQS=") && !strings.HasPrefix(kv, "SQSINBOX_TEST_GOAWS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, envChild+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var endpoint string
	var pid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "server %s %d", &endpoint, &pid); err == nil {
			break
		}
	}
	if pid == 0 || endpoint == srv.Endpoint {
		t.Fatalf("the child started no server of its own (endpoint %q, pid %d)", endpoint, pid)
	}
	if err := health(endpoint); err != nil {
		t.Fatalf("the child's server does not answer: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for health(endpoint) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the test binary was killed, its server (pid %d) still answers at %s", pid, endpoint)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func health(endpoint string) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(endpoint + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /health: %s", resp.Status)
	}
	return nil
}
