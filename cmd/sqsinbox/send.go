package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// MaxBodyBytes is the largest body sent: 256 KiB, the limit of SQS until 2025 and of the
// emulators still. (AWS now accepts 1 MiB.)
const maxBodyBytes = 256 * 1024

func runSend(ctx context.Context, e env, args []string) error {
	fs := newFlags(e, "send", "send [flags] --queue QUEUE [FILE]",
		"  echo '{\"id\":\"evt_9f3k\",\"order_id\":\"o-1\"}' | sqsinbox send --queue warehouse\n"+
			"  sqsinbox send --queue warehouse --repeat 3 --rate 100 events.jsonl   # each event 3 times, 100 msgs/s\n\n"+
			"Each line is one JSON object; its --key-field becomes the event_id message attribute,\n"+
			"which the worker uses as the event key. --repeat sends duplicates on purpose.")
	queue := fs.String("queue", "", "queue name or URL (required)")
	repeat := fs.Int("repeat", 1, "send each line this many times (duplicates on purpose)")
	rate := fs.Float64("rate", 0, "at most this many messages per second (0: no limit)")
	keyField := fs.String("key-field", "id", "top-level JSON field whose value becomes the event_id attribute")
	allowNoKey := fs.Bool("allow-no-key", false, "send lines without the key field (no event_id attribute) instead of refusing them")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *repeat < 1 || *rate < 0 {
		return fmt.Errorf("%w: --repeat must be at least 1 and --rate not negative", errUsage)
	}
	if *queue == "" {
		return fmt.Errorf("%w: --queue is required", errUsage)
	}
	in := e.stdin
	name := "stdin"
	if fs.NArg() > 1 {
		return fmt.Errorf("%w: at most one input file", errUsage)
	}
	if fs.NArg() == 1 && fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		in, name = f, fs.Arg(0)
	}
	// Read and check every line first, so a bad line sends nothing.
	var entries []types.SendMessageBatchRequestEntry
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), maxBodyBytes+1)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		if len(b) > maxBodyBytes {
			return fmt.Errorf("%s line %d: %d bytes, over the %d-byte message limit", name, line, len(b), maxBodyBytes)
		}
		if !json.Valid(b) {
			return fmt.Errorf("%s line %d: not valid JSON", name, line)
		}
		entry := types.SendMessageBatchRequestEntry{MessageBody: aws.String(string(b))}
		key, err := inbox.KeyFromJSONField(b, *keyField)
		switch {
		case err == nil:
			entry.MessageAttributes = map[string]types.MessageAttributeValue{
				"event_id": {DataType: aws.String("String"), StringValue: aws.String(key)},
			}
		case !*allowNoKey:
			return fmt.Errorf("%s line %d: %w (use --allow-no-key to send it without an event_id)", name, line, err)
		}
		for range *repeat {
			entries = append(entries, entry)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s line %d: %w", name, line+1, err)
	}
	c, err := sqsClient(ctx)
	if err != nil {
		return err
	}
	url, err := queueURL(ctx, c, *queue)
	if err != nil {
		return err
	}
	p := newProgress(e.stderr)
	start := time.Now()
	sent := 0
	for sent < len(entries) {
		if err := ctx.Err(); err != nil {
			p.done()
			fmt.Fprintf(e.stdout, "interrupted: sent %d of %d messages\n", sent, len(entries))
			return err
		}
		if *rate > 0 {
			due := start.Add(time.Duration(float64(sent) / *rate * float64(time.Second)))
			if err := sleepUntil(ctx, due); err != nil {
				continue
			}
		}
		n := min(10, len(entries)-sent)
		if *rate > 0 {
			n = min(n, max(1, int(*rate)))
		}
		if err := sendBatch(ctx, c, url, entries[sent:sent+n]); err != nil {
			p.done()
			fmt.Fprintf(e.stdout, "sent %d of %d messages before the error\n", sent, len(entries))
			return err
		}
		sent += n
		p.update("sent %d/%d messages", sent, len(entries))
	}
	p.done()
	fmt.Fprintf(e.stdout, "sent %d messages (%d lines × %d) to %s in %.1fs\n", sent, len(entries) / *repeat, *repeat,
		lastPart(url), time.Since(start).Seconds())
	return nil
}

// sendBatch sends up to ten entries and retries only the ones that failed.
func sendBatch(ctx context.Context, c *sqs.Client, url string, entries []types.SendMessageBatchRequestEntry) error {
	pending := make([]types.SendMessageBatchRequestEntry, len(entries))
	for i, en := range entries {
		en.Id = aws.String(strconv.Itoa(i))
		pending[i] = en
	}
	for attempt := 1; ; attempt++ {
		out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: pending})
		if err != nil {
			return fmt.Errorf("send to %s: %s", lastPart(url), apiError(err))
		}
		// GoAws answers with empty Successful and Failed lists; only listed failures are retried.
		if len(out.Failed) == 0 {
			return nil
		}
		if attempt == 5 {
			f := out.Failed[0]
			return fmt.Errorf("send to %s: %d messages failed 5 times, e.g. %s: %s", lastPart(url), len(out.Failed),
				aws.ToString(f.Code), aws.ToString(f.Message))
		}
		failed := map[string]bool{}
		for _, f := range out.Failed {
			failed[aws.ToString(f.Id)] = true
		}
		var next []types.SendMessageBatchRequestEntry
		for _, en := range pending {
			if failed[aws.ToString(en.Id)] {
				next = append(next, en)
			}
		}
		pending = next
		if err := sleepUntil(ctx, time.Now().Add(time.Duration(attempt)*200*time.Millisecond)); err != nil {
			return err
		}
	}
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
