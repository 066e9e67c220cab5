package main

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// screenshotsEnv names a directory (relative to the repository's root, or absolute) that the
// browser test writes the console's screenshots to, as docs/console.md shows them:
// SQSINBOX_SCREENSHOTS=docs go test -run TestConsoleInABrowser ./cmd/sqsinbox/
const screenshotsEnv = "SQSINBOX_SCREENSHOTS"

// findChromium returns Debian's Chromium, installing it first when it is missing and the test
// runs as root with apt-get (as the harness installs the SQS servers); otherwise it fails the test
// with how to install it. Nothing here downloads a browser build of its own.
func findChromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := exec.LookPath("apt-get"); err == nil && os.Geteuid() == 0 {
		t.Log("Chromium is missing: installing Debian's chromium package")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "chromium"}} {
			cmd := exec.CommandContext(ctx, "apt-get", args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the browser test needs Chromium; apt-get %s failed: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		if p, err := exec.LookPath("chromium"); err == nil {
			return p
		}
	}
	t.Fatal("the browser test needs Chromium, and it is not on PATH: install Debian's package with " +
		"`apt-get install -y chromium` (as root, the test does it itself)")
	return ""
}

// TestConsoleInABrowser (the SQS server, PostgreSQL and headless Chromium): the console as an
// operator uses it, in a real browser. The overview loads; the lookup finds an event processed in
// the test; the DLQ page opened receives nothing, and its Peek button is disabled until sign-in;
// signed in, the button peeks, from the browser's own same-origin POST, and shows a body holding
// <script> as text, and the script does not run (it would set document.title); the redrive then
// moves exactly the messages the handler never applied. Chromium is installed when missing
// (findChromium).
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	chromium := findChromium(t)
	pool, dbArgs := migratedSchema(t, "cli_conweb")
	schema := dbArgs[len(dbArgs)-1]
	processEvent(t, pool, schema, "warehouse", "evt_7d2a")
	processEvent(t, pool, schema, "loyalty", "evt_7d2a")
	processEvent(t, pool, schema, "warehouse", "evt_4c1e")
	seedOutbox(t, pool, schema)
	const xss = `{"id":"evt_9f3k","order_id":"o-1","note":"<script>document.title='pwned'</script>"}`
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "warehouse", MaxReceiveCount: 3})
	cli(t, strings.Join([]string{xss, `{"id":"evt_4c1e","order_id":"o-2"}`, `{"id":"evt_b81d","order_id":"o-3"}`, `{"order_id":"o-4"}`}, "\n"),
		"send", "--queue", lastPart(q.DLQURL), "--allow-no-key").mustOK(t)
	cli(t, `{"id":"evt_0001","order_id":"o-5"}`+"\n"+`{"id":"evt_0002","order_id":"o-6"}`, "send", "--queue", q.Name).mustOK(t)
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 4, 30*time.Second)
	now := time.Now()
	cw.answer(q.Name, cwAnswer{ages: []float64{42}, at: []time.Time{now.Add(-time.Minute)}})
	cw.answer(lastPart(q.DLQURL), cwAnswer{ages: []float64{3 * 3600}, at: []time.Time{now.Add(-time.Minute)}})
	tc := startConsole(t, append([]string{"--queue", q.Name, "--token", testToken}, dbArgs...)...)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v\nconsole log:\n%s", what, err, tc.stderr)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
		must("text of "+sel, err)
		return s
	}
	title := func() string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.title`))
		must("document.title", err)
		return s
	}
	// clickAndLoad clicks a form's button and waits until the page it loads has loaded, so that
	// the next step reads the new page, not the old one; it returns the page's HTTP status.
	clickAndLoad := func(sel string) int64 {
		t.Helper()
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
		must("click "+sel, err)
		return resp.Status
	}
	shots := screenshotDir(t)
	shoot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		must("screenshot "+name, err)
		p := filepath.Join(shots, "console-"+name+".png")
		must("write "+p, os.WriteFile(p, png, 0o644))
		t.Logf("wrote %s", p)
	}

	// The overview loads, with the queue, its DLQ and the ages CloudWatch gave.
	must("open the overview", chromedp.Do(ctx, chromedp.Navigate(tc.url+"/"), chromedp.WaitVisible(chromedp.CSS("#queues table"))))
	if s := text("#queues"); !strings.Contains(s, q.Name) || !strings.Contains(s, lastPart(q.DLQURL)) || !strings.Contains(s, "42s as of") {
		t.Errorf("the queues section:\n%s", s)
	}

	// The lookup finds the event processed above.
	must("type the key", chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#key"), "evt_7d2a")))
	clickAndLoad("#lookup-button")
	must("look up evt_7d2a", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#lookup-result"))))
	if s := text("#lookup-result"); !strings.Contains(s, "warehouse") || !strings.Contains(s, "loyalty") || !strings.Contains(s, "evt_7d2a") {
		t.Errorf("the lookup of evt_7d2a:\n%s", s)
	}

	// The DLQ page as opened: nothing received, and neither Peek nor Redrive before signing in.
	must("open the DLQ page", chromedp.Do(ctx, chromedp.Navigate(tc.url+"/dlq?queue="+url.QueryEscape(q.Name)), chromedp.WaitVisible(chromedp.CSS("#peek-none"))))
	for _, id := range []string{"peek-button", "redrive"} {
		disabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("`+id+`").disabled`))
		must("read the "+id+" button", err)
		if !disabled {
			t.Errorf("the %s button is enabled before signing in", id)
		}
	}

	// Sign in with the token, then peek: the <script> of a body is text, and it did not run.
	must("open the sign-in page", chromedp.Do(ctx, chromedp.Navigate(tc.url+"/login"), chromedp.SendKeys(chromedp.CSS("#token"), testToken)))
	clickAndLoad("#sign-in")
	must("sign in", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#sign-out"))))
	must("open the DLQ page signed in", chromedp.Do(ctx,
		chromedp.Navigate(tc.url+"/dlq?queue="+url.QueryEscape(q.Name)), chromedp.WaitVisible(chromedp.CSS("#peek-none"))))
	if status := clickAndLoad("#peek-button"); status != http.StatusOK {
		t.Fatalf("the peek: HTTP %d\nconsole log:\n%s", status, tc.stderr)
	}
	must("wait for the peek", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#peek"))))
	if s := text("#peek"); !strings.Contains(s, "<script>document.title='pwned'</script>") || !strings.Contains(s, "evt_b81d") {
		t.Errorf("the peek does not show the messages, the body's <script> as text:\n%s", s)
	}
	if got := title(); got == "pwned" || !strings.Contains(got, "sqsinbox console") {
		t.Errorf("document.title is %q: the body's script ran", got)
	}
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#peek script").length`))
	must("count scripts", err)
	if n != 0 {
		t.Errorf("the peek table holds %d script elements; want 0", n)
	}

	// The redrive against warehouse's inbox rows, from the page the peek answered.
	must("type the handler", chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#handler"), "warehouse")))
	shoot("dlq")
	status := clickAndLoad("#redrive")
	must("wait for the result", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#report"))))
	if s := text("#result"); status != http.StatusOK || !strings.Contains(s, "never applied: moved to "+q.Name) || !strings.Contains(s, "moved 2 messages") {
		t.Errorf("the redrive's result (HTTP %d):\n%s", status, s)
	}
	shoot("redrive")
	if got := title(); got == "pwned" {
		t.Errorf("document.title is %q: a script ran", got)
	}

	// Exactly the two messages warehouse never applied are back in the queue (beside the two
	// sent there); the applied one is gone, the keyless one left in the DLQ.
	got := keysIn(t, q.URL, 4)
	if want := []string{"evt_0001", "evt_0002", "evt_9f3k", "evt_b81d"}; !slices.Equal(got, want) {
		t.Errorf("the queue holds %v; want %v", got, want)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second)

	// The overview as an operator sees it after the redrive, signed in.
	must("open the overview again", chromedp.Do(ctx, chromedp.Navigate(tc.url+"/?key=evt_7d2a"), chromedp.WaitVisible(chromedp.CSS("#lookup-result"))))
	shoot("overview")
}

// screenshotDir is the directory SQSINBOX_SCREENSHOTS names, made absolute ("" when unset).
func screenshotDir(t *testing.T) string {
	d := os.Getenv(screenshotsEnv)
	if d == "" {
		return ""
	}
	if !filepath.IsAbs(d) {
		d = filepath.Join("..", "..", d) // the test runs in cmd/sqsinbox
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}
