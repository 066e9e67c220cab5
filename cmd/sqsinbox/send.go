package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/s3payload"
)

// defaultMaxBytes is a destination's limit when it does not say its MaximumMessageSize: 256 KiB,
// the default of SQS queues and SNS topics (both accept up to 1 MiB where the attribute is raised).
const defaultMaxBytes = 256 * 1024

// maxMessageBytes is the largest MaximumMessageSize of SQS and SNS: 1 MiB.
const maxMessageBytes = 1 << 20

func runSend(ctx context.Context, e env, args []string) error {
	fs, o := sendFlags(e)
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	s, err := o.check()
	if err != nil {
		return err
	}
	in, closeIn, err := s.input(e, words)
	if err != nil {
		return err
	}
	defer closeIn()
	// The destination, and its limit, before any line is read: a line over it sends nothing.
	d, err := o.destination(ctx, e, fs.timeout)
	if err != nil {
		return err
	}
	if err := s.setLimit(ctx, fs.timeout, d); err != nil {
		return err
	}
	// Read and check every line first, so a bad line sends nothing.
	if err := readLines(in, s.readLimit, func(line int, b []byte, n int) error { return s.add(ctx, line, b, n) }); err != nil {
		return err
	}
	if s.dedup.literal() && s.lines > 1 {
		return fmt.Errorf("%w: --dedup-id %q gives all %d lines one deduplication id, so SQS would drop all but the first; use --dedup-id key or field:NAME",
			errUsage, o.dedupID, s.lines)
	}
	tr, err := startTracing(ctx, e, o.topic, d.url)
	if err != nil {
		return err
	}
	defer tr.flush(ctx)
	return sendAll(ctx, e, d, s, o, tr)
}

// sendOptions are send's flags.
type sendOptions struct {
	queue, topic, keyField, groupID, dedupID, offBucket string
	repeat, maxBytes, offMax                            int
	rate                                                float64
	allowNoKey, offAlways, raw                          bool
	attrSpecs                                           attrFlags
}

// sendFlags is send's flag set, and the options its flags set.
func sendFlags(e env) (*flags, *sendOptions) {
	o := &sendOptions{}
	fs := newFlags(e, "send", "send --queue QUEUE|--topic-arn ARN [flags] [FILE]",
		"  echo '{\"id\":\"evt_9f3k\",\"order_id\":\"o-1\"}' | sqsinbox send --queue warehouse\n"+
			"  sqsinbox send --queue warehouse --repeat 3 --rate 100 events.jsonl   # each event 3 times, 100 msgs/s\n"+
			"  sqsinbox send --queue orders.fifo --group-id field:order_id --dedup-id key events.jsonl\n"+
			"  sqsinbox send --topic-arn arn:aws:sns:us-east-1:123456789012:orders events.jsonl   # SNS fan-out\n\n"+
			"Each line is one JSON object; its --key-field becomes the event_id message attribute,\n"+
			"which the worker uses as the event key. --repeat sends duplicates on purpose.\n\n"+
			"--topic-arn publishes to an SNS topic instead (PublishBatch, or Publish where the server\n"+
			"has no PublishBatch), with the same event_id attribute: every queue subscribed to the\n"+
			"topic gets each line, raw or in an SNS envelope, and the worker reads the key either way.\n\n"+
			"--attr NAME=VALUE (repeatable) sets a message attribute on every message: a String, or a\n"+
			"Number with NAME:Number=VALUE. An inboxhandler.Router reads the type from the attribute\n"+
			"type: --attr type=OrderPaid. Names follow SQS's rules (letters, digits, _ - and ., no AWS.\n"+
			"or Amazon. prefix); event_id is send's own. --raw sends lines that are not JSON as they\n"+
			"are (without event_id): the handler fails them, and they go the retry-then-DLQ way.\n"+
			"Every line, --raw or JSON, is checked before the first is sent: a line with a character\n"+
			"SQS refuses in a body (a control character other than tab, LF and CR, U+FFFE, U+FFFF, or\n"+
			"bytes that are not UTF-8), over the size limit, or not JSON without --raw sends nothing.\n\n"+
			"A FIFO queue or topic (its name ends in .fifo) needs --group-id; on a standard queue it\n"+
			"is optional (the tenant of SQS fair queues). --dedup-id is for FIFO\n"+
			"ones without content-based deduplication. Each takes a literal id, `key` (the line's event\n"+
			"key) or `field:NAME` (the line's top-level field NAME). SQS allows 1 to 128 characters of\n"+
			"letters, digits and punctuation. With --dedup-id key, SQS drops a --repeat copy sent\n"+
			"within 5 minutes of the first.\n\n"+
			"A message (the line plus its event_id attribute) may be at most the queue's or topic's\n"+
			"MaximumMessageSize (256 KiB unless raised, up to 1 MiB; 256 KiB where the server does not\n"+
			"say), read before anything is sent; --max-bytes sets a lower limit.\n\n"+
			"--offload-bucket puts each line over that limit (every line, with --offload-always) in\n"+
			"that S3 bucket, under sqsinbox/<event key>/<SHA-256 of the line>, and sends a pointer\n"+
			"to it with the ExtendedPayloadSize attribute, in the format of AWS's extended client\n"+
			"libraries: workers fetch it back (SQSINBOX_PAYLOAD_BUCKETS). A line is at most\n"+
			"--offload-max-bytes then. Objects are never deleted by sqsinbox: the bucket's lifecycle\n"+
			"rule expires them.\n\n"+traceEnvHelp)
	fs.StringVar(&o.queue, "queue", "", "queue name or URL (this or --topic-arn is required)")
	fs.StringVar(&o.topic, "topic-arn", "", "publish to this SNS topic instead of sending to a queue")
	fs.IntVar(&o.repeat, "repeat", 1, "send each line this many times (duplicates on purpose)")
	fs.Float64Var(&o.rate, "rate", 0, "at most this many messages per second (0: no limit)")
	fs.StringVar(&o.keyField, "key-field", "id", "top-level JSON field whose value becomes the event_id attribute")
	fs.BoolVar(&o.allowNoKey, "allow-no-key", false, "send lines without the key field (no event_id attribute) instead of refusing them")
	fs.IntVar(&o.maxBytes, "max-bytes", 0, "the largest message sent, body and attributes, in bytes (0: the queue's or topic's MaximumMessageSize)")
	fs.StringVar(&o.groupID, "group-id", "", "MessageGroupId: a literal, key (the event key) or field:NAME; required for FIFO, a fair-queue tenant on a standard queue")
	fs.StringVar(&o.dedupID, "dedup-id", "", "FIFO MessageDeduplicationId: a literal, key (the event key) or field:NAME")
	fs.StringVar(&o.offBucket, "offload-bucket", "", "put lines over the message limit in this S3 bucket and send pointers to them")
	fs.BoolVar(&o.offAlways, "offload-always", false, "with --offload-bucket, offload every line, whatever its size")
	fs.IntVar(&o.offMax, "offload-max-bytes", s3payload.DefaultMaxPayload, "with --offload-bucket, the largest line sent")
	fs.Var(&o.attrSpecs, "attr", "a message attribute on every message, NAME=VALUE or NAME:Number=VALUE (repeatable), e.g. type=OrderPaid")
	fs.BoolVar(&o.raw, "raw", false, "send lines that are not JSON as they are (a poison message, to try the DLQ path); those go without event_id")
	return fs, o
}

// check validates the flags, before anything is read or sent, and returns the line reader they
// make.
func (o *sendOptions) check() (*sendLines, error) {
	if o.repeat < 1 || o.rate < 0 {
		return nil, fmt.Errorf("%w: --repeat must be at least 1 and --rate not negative", errUsage)
	}
	switch {
	case o.queue == "" && o.topic == "":
		return nil, fmt.Errorf("%w: --queue is required (or --topic-arn to publish to an SNS topic)", errUsage)
	case o.queue != "" && o.topic != "":
		return nil, fmt.Errorf("%w: --queue and --topic-arn exclude each other: send to a queue or publish to a topic", errUsage)
	case o.topic != "" && !isTopicARN(o.topic):
		return nil, fmt.Errorf("%w: --topic-arn %q is not an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)", errUsage, o.topic)
	}
	if o.maxBytes < 0 || o.maxBytes > maxMessageBytes {
		return nil, fmt.Errorf("%w: --max-bytes %d: want 1 to 1048576 (1 MiB, the largest SQS and SNS accept), or 0 for the destination's own", errUsage, o.maxBytes)
	}
	dest, kind := o.queue, "queue"
	if o.topic != "" {
		dest, kind = topicName(o.topic), "topic"
	}
	fifo := strings.HasSuffix(dest, ".fifo")
	switch {
	case fifo && o.groupID == "":
		return nil, fmt.Errorf("%w: %s is a FIFO %s: pass --group-id (a literal, key or field:NAME)", errUsage, lastPart(dest), kind)
	case !fifo && o.dedupID != "":
		return nil, fmt.Errorf("%w: --dedup-id is for FIFO queues and topics (their names end in .fifo)", errUsage)
	}
	s := &sendLines{o: o}
	var err error
	if s.attrs, s.attrsSize, err = parseAttrs(o.attrSpecs, "event_id"); err != nil {
		return nil, err
	}
	if s.group, err = newFIFOID("--group-id", "MessageGroupId", o.groupID); err != nil {
		return nil, err
	}
	if s.dedup, err = newFIFOID("--dedup-id", "MessageDeduplicationId", o.dedupID); err != nil {
		return nil, err
	}
	return s, nil
}

// sendDest is where send sends or publishes, and the largest message it takes.
type sendDest struct {
	send   func(ctx context.Context, batch []types.SendMessageBatchRequestEntry) error
	target string
	url    string // the queue's; "" for a topic
	verb   string
	limit  int
	whose  string // what sets limit, for the error of a line over it
}

// destination connects to the queue or topic and reads its MaximumMessageSize.
func (o *sendOptions) destination(ctx context.Context, e env, timeout time.Duration) (*sendDest, error) {
	d := &sendDest{verb: "sent"}
	if o.topic != "" {
		c, err := snsClient(ctx, timeout)
		if err != nil {
			return nil, err
		}
		d.limit = topicMaxBytes(ctx, c, o.topic, e.stderr)
		pub := &publisher{c: c, topicARN: o.topic, stderr: e.stderr}
		d.send, d.target, d.verb, d.whose = pub.publish, topicName(o.topic), "published", "the topic's"
		return d, nil
	}
	c, err := sqsClient(ctx, timeout)
	if err != nil {
		return nil, err
	}
	url, err := queueURL(ctx, c, o.queue)
	if err != nil {
		return nil, err
	}
	d.url, d.limit = url, queueMaxBytes(ctx, c, url, e.stderr)
	d.send = func(ctx context.Context, batch []types.SendMessageBatchRequestEntry) error {
		return sendBatch(ctx, c, url, batch)
	}
	d.target, d.whose = lastPart(url), "the queue's"
	return d, nil
}

// sendLines reads the input's lines into the messages to send, each checked against the limit.
type sendLines struct {
	o            *sendOptions
	attrs        map[string]types.MessageAttributeValue
	attrsSize    int
	group, dedup fifoID

	name      string // the input's, for errors
	limit     int    // a message's, attributes included
	readLimit int    // a line's: limit, or --offload-max-bytes
	limitText string
	off       *offloader

	entries []types.SendMessageBatchRequestEntry
	sizes   []int
	lineOf  []int // each entry's line number
	lines   int
}

// input opens the FILE word, or stdin without one (or with -); closeIn closes it.
func (s *sendLines) input(e env, words []string) (in io.Reader, closeIn func(), err error) {
	in, s.name = e.stdin, "stdin"
	if len(words) > 1 {
		return nil, nil, fmt.Errorf("%w: at most one input file", errUsage)
	}
	if len(words) == 1 && words[0] != "-" {
		f, err := os.Open(words[0])
		if err != nil {
			return nil, nil, err
		}
		s.name = words[0]
		return f, func() { _ = f.Close() }, nil
	}
	return in, func() {}, nil
}

// setLimit sets the message and line limits: d's MaximumMessageSize, or --max-bytes below it,
// and --offload-max-bytes for a line when --offload-bucket is set.
func (s *sendLines) setLimit(ctx context.Context, timeout time.Duration, d *sendDest) error {
	o := s.o
	switch {
	case o.maxBytes > d.limit:
		return fmt.Errorf("%w: --max-bytes %d is over %s MaximumMessageSize, %s: %s %s would refuse such a message; raise its MaximumMessageSize first",
			errUsage, o.maxBytes, d.whose, bytesText(d.limit), strings.TrimSuffix(d.whose, "'s"), d.target)
	case o.maxBytes > 0:
		d.limit, d.whose = o.maxBytes, "--max-bytes"
	default:
		d.whose += " MaximumMessageSize"
	}
	s.limit, s.readLimit = d.limit, d.limit
	s.limitText = fmt.Sprintf("%s message limit (%s)", bytesText(d.limit), d.whose)
	off, err := newOffloader(ctx, timeout, o.offBucket, o.offAlways, o.offMax, d.limit)
	if err != nil {
		return err
	}
	if s.off = off; off != nil {
		s.readLimit, s.limitText = o.offMax, fmt.Sprintf("%s line limit (--offload-max-bytes)", bytesText(o.offMax))
	}
	return nil
}

// add is readLines's callback: it checks line number line (b, of n bytes; nil when over the
// read limit) and adds its message --repeat times. An empty line is skipped.
func (s *sendLines) add(ctx context.Context, line int, b []byte, n int) error {
	if n == 0 {
		return nil
	}
	if b == nil {
		return fmt.Errorf("%s line %d: %d bytes, over the %s", s.name, line, n, s.limitText)
	}
	entry, key, size, err := s.message(ctx, line, b)
	if err != nil {
		return err
	}
	if entry.MessageGroupId, err = s.group.of(b, key); err != nil {
		return fmt.Errorf("%s line %d: %w", s.name, line, err)
	}
	if entry.MessageDeduplicationId, err = s.dedup.of(b, key); err != nil {
		return fmt.Errorf("%s line %d: %w", s.name, line, err)
	}
	s.lines++
	for range s.o.repeat {
		s.entries = append(s.entries, entry)
		s.sizes = append(s.sizes, size)
		s.lineOf = append(s.lineOf, line)
	}
	return nil
}

// message is line b's message, with its attributes and event key, offloaded when it must be,
// and its size as SQS counts it.
func (s *sendLines) message(ctx context.Context, line int, b []byte) (types.SendMessageBatchRequestEntry, string, int, error) {
	var none types.SendMessageBatchRequestEntry
	isJSON := json.Valid(b)
	if !isJSON && !s.o.raw {
		return none, "", 0, fmt.Errorf("%s line %d: not valid JSON (use --raw to send it as it is)", s.name, line)
	}
	entry := types.SendMessageBatchRequestEntry{MessageBody: aws.String(string(b))}
	// SQS counts an attribute's name, type and value in the message's size.
	size := len(b) + s.attrsSize
	if s.attrs != nil {
		entry.MessageAttributes = maps.Clone(s.attrs)
	}
	key, err := inbox.KeyFromJSONField(b, s.o.keyField)
	switch {
	case err == nil:
		if entry.MessageAttributes == nil {
			entry.MessageAttributes = map[string]types.MessageAttributeValue{}
		}
		entry.MessageAttributes["event_id"] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(key)}
		size += len("event_id") + len("String") + len(key)
	case !isJSON:
		// --raw: a body that is not JSON has no key field.
	case !s.o.allowNoKey:
		return none, "", 0, fmt.Errorf("%s line %d: %w (use --allow-no-key to send it without an event_id)", s.name, line, err)
	}
	if s.off != nil && (s.off.always || size > s.limit) {
		if size, err = s.off.put(ctx, &entry, key, b); err != nil {
			return none, "", 0, fmt.Errorf("%s line %d: %w", s.name, line, err)
		}
	}
	if err := outbox.ValidateText(aws.ToString(entry.MessageBody)); err != nil {
		return none, "", 0, fmt.Errorf("%s line %d: the line %w", s.name, line, err)
	}
	if size > s.limit {
		with := "its event_id attribute"
		if s.attrs != nil {
			with = "its attributes"
		}
		return none, "", 0, fmt.Errorf("%s line %d: %d bytes with %s, over the %s", s.name, line, size, with, s.limitText)
	}
	return entry, key, size, nil
}

// sendAll sends the messages in batches of up to ten, at most --rate a second, and reports how
// many it sent.
func sendAll(ctx context.Context, e env, d *sendDest, s *sendLines, o *sendOptions, tr *sendTracing) error {
	p := newProgress(e.stderr)
	start := time.Now()
	sent, total := 0, len(s.entries)
	// ready are the next messages, their spans started (the ones the last batch could not
	// carry once their trace headers were in): prepared as they are sent, so that a span
	// covers the call that sends its message, not a --rate wait.
	var ready []outgoing
	defer func() { tr.end(ready, errNotSent) }()
	for sent < total {
		if err := ctx.Err(); err != nil {
			p.done()
			fmt.Fprintf(e.stdout, "interrupted: %s %d of %s\n", d.verb, sent, plural(total, "message"))
			return err
		}
		if o.rate > 0 {
			due := start.Add(time.Duration(float64(sent) / o.rate * float64(time.Second)))
			if err := sleepUntil(ctx, due); err != nil {
				continue
			}
		}
		n := min(10, total-sent)
		if o.rate > 0 {
			n = min(n, max(1, int(o.rate)))
		}
		for i := sent + len(ready); i < sent+n; i++ {
			ready = append(ready, tr.start(s.entries[i], s.sizes[i], s.lineOf[i], s.limit))
		}
		n, err := sendReady(ctx, d, ready[:n], s.limit)
		tr.end(ready[:n], err)
		ready = ready[n:]
		if err != nil {
			p.done()
			fmt.Fprintf(e.stdout, "%s %d of %s before the error\n", d.verb, sent, plural(total, "message"))
			return err
		}
		sent += n
		p.update("%s %d/%d messages", d.verb, sent, total)
	}
	p.done()
	fmt.Fprintf(e.stdout, "%s %s (%s × %d) to %s in %.1fs\n", d.verb, plural(sent, "message"), plural(s.lines, "line"), o.repeat,
		d.target, time.Since(start).Seconds())
	return nil
}

// sendReady sends as many of the first of ready as one batch carries (fitBatch) and returns how
// many that was.
func sendReady(ctx context.Context, d *sendDest, ready []outgoing, limit int) (int, error) {
	batch, batchSizes := make([]types.SendMessageBatchRequestEntry, len(ready)), make([]int, len(ready))
	for i, m := range ready {
		batch[i], batchSizes[i] = m.entry, m.size
	}
	n := fitBatch(batchSizes, limit)
	return n, d.send(ctx, batch[:n])
}

// errNotSent ends the span of a message that send stopped before sending.
var errNotSent = errors.New("not sent: send stopped before it")

// fitBatch returns how many of the first messages, of these sizes, one SendMessageBatch may
// carry: SQS limits a batch's total payload to the size of one message. At least one.
func fitBatch(sizes []int, limit int) int {
	total := 0
	for i, s := range sizes {
		if total += s; total > limit {
			return max(i, 1)
		}
	}
	return len(sizes)
}

// bytesText shows a limit as "262144-byte (256 KiB)".
func bytesText(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%d-byte (%d KiB)", n, n/1024)
	}
	return fmt.Sprintf("%d-byte", n)
}

// readLines calls fn with each line of r, without its line ending ("\n" or "\r\n"), its number
// and its length. A line longer than limit is passed as nil, with its length, and is never held
// whole in memory.
func readLines(r io.Reader, limit int, fn func(line int, b []byte, n int) error) error {
	br := bufio.NewReaderSize(r, 64*1024)
	for line := 1; ; line++ {
		var (
			b   []byte
			n   int
			err error
		)
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			n += len(chunk)
			if len(b) <= limit+1 { // past that the line is too long: only its length matters
				b = append(b, chunk...)
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			return fmt.Errorf("line %d: %w", line, err)
		case n == 0:
			return nil // end of input
		}
		if err == nil { // the line ended with a newline
			n--
			if len(b) == n+1 && n > 0 && b[n-1] == '\r' {
				n--
			}
		}
		if n > limit {
			b = nil
		} else {
			b = b[:n]
		}
		if ferr := fn(line, b, n); ferr != nil {
			return ferr
		}
		if errors.Is(err, io.EOF) {
			return nil // the last line had no newline
		}
	}
}

// fifoID is how --group-id or --dedup-id derives a line's id.
type fifoID struct {
	flag, attr string
	value      string // a literal, "key", or "field:NAME"
}

func newFIFOID(flag, attr, value string) (fifoID, error) {
	f := fifoID{flag: flag, attr: attr, value: value}
	if f.literal() {
		if err := f.check(value); err != nil {
			return f, fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	if name, ok := strings.CutPrefix(value, "field:"); ok && name == "" {
		return f, fmt.Errorf("%w: %s field: needs a field name, as in field:order_id", errUsage, flag)
	}
	return f, nil
}

func (f fifoID) literal() bool {
	return f.value != "" && f.value != "key" && !strings.HasPrefix(f.value, "field:")
}

// of returns the id of the line body with event key key (nil when the flag is not set).
func (f fifoID) of(body []byte, key string) (*string, error) {
	id := f.value
	switch name, isField := strings.CutPrefix(f.value, "field:"); {
	case f.value == "":
		return nil, nil
	case f.value == "key":
		if key == "" {
			return nil, fmt.Errorf("%s key: the line has no event key", f.flag)
		}
		id = key
	case isField:
		v, err := inbox.KeyFromJSONField(body, name)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", f.flag, f.value, err)
		}
		id = v
	}
	if err := f.check(id); err != nil {
		return nil, err
	}
	return aws.String(id), nil
}

// check applies SQS's rules for a FIFO id: 1 to 128 characters, each ASCII letter, digit or
// punctuation.
func (f fifoID) check(id string) error {
	const rule = "SQS allows 1 to 128 ASCII letters, digits and punctuation"
	if len(id) == 0 || len(id) > 128 {
		return fmt.Errorf("%s: %s of %d characters: %s", f.flag, f.attr, len(id), rule)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '!' || id[i] > '~' {
			return fmt.Errorf("%s: %s %s has %s at byte %d: %s", f.flag, f.attr, strconv.Quote(id), strconv.QuoteRune(rune(id[i])), i, rule)
		}
	}
	return nil
}

// sendBatch sends up to ten entries and retries only the ones that failed.
func sendBatch(ctx context.Context, c *sqs.Client, url string, entries []types.SendMessageBatchRequestEntry) error {
	pending := make([]types.SendMessageBatchRequestEntry, len(entries))
	for i, en := range entries {
		en.Id = aws.String(strconv.Itoa(i))
		pending[i] = en
	}
	what := "send to " + lastPart(url)
	return retryFailed(ctx, what, pending, func(e types.SendMessageBatchRequestEntry) string { return aws.ToString(e.Id) },
		func(pending []types.SendMessageBatchRequestEntry) ([]batchFailure, error) {
			out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: pending})
			if err != nil {
				return nil, fmt.Errorf("%s: %s", what, apiError(err))
			}
			// GoAws answers with empty Successful and Failed lists; only listed failures are retried.
			failed := make([]batchFailure, len(out.Failed))
			for i, f := range out.Failed {
				failed[i] = batchFailure{aws.ToString(f.Id), aws.ToString(f.Code), aws.ToString(f.Message)}
			}
			return failed, nil
		})
}

// batchFailure is an entry that a batch call (SendMessageBatch, PublishBatch) listed as failed.
type batchFailure struct{ id, code, message string }

// retryFailed calls send with the entries, then again with only the ones it listed as failed,
// pausing a little longer each time, up to five calls. what names the call in the error.
func retryFailed[E any](ctx context.Context, what string, pending []E, id func(E) string, send func([]E) ([]batchFailure, error)) error {
	for attempt := 1; ; attempt++ {
		failed, err := send(pending)
		if err != nil || len(failed) == 0 {
			return err
		}
		if attempt == 5 {
			return fmt.Errorf("%s: %s failed 5 times, e.g. %s: %s", what, plural(len(failed), "message"), failed[0].code, failed[0].message)
		}
		ids := map[string]bool{}
		for _, f := range failed {
			ids[f.id] = true
		}
		var next []E
		for _, e := range pending {
			if ids[id(e)] {
				next = append(next, e)
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

// queueMaxBytes reads the queue's MaximumMessageSize: the largest message it takes. A server
// that does not say (or says 0, as GoAws can after SetQueueAttributes), or a call that fails (the
// send then fails with its own error), gets SQS's default, with a line on stderr.
func queueMaxBytes(ctx context.Context, c *sqs.Client, url string, stderr io.Writer) int {
	what := "queue " + lastPart(url)
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMaximumMessageSize}})
	if err != nil {
		return maxBytesUnread(what, apiError(err), stderr)
	}
	return maxBytesOf(out.Attributes["MaximumMessageSize"], what, stderr)
}

// topicMaxBytes reads the topic's MaximumMessageSize, as queueMaxBytes does.
func topicMaxBytes(ctx context.Context, c *sns.Client, arn string, stderr io.Writer) int {
	what := "topic " + topicName(arn)
	out, err := c.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(arn)})
	if err != nil {
		return maxBytesUnread(what, apiError(err), stderr)
	}
	return maxBytesOf(out.Attributes["MaximumMessageSize"], what, stderr)
}

// maxBytesOf parses a MaximumMessageSize attribute of what; absent, 0 or out of range, it is
// the default.
func maxBytesOf(v, what string, stderr io.Writer) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxMessageBytes {
		return maxBytesUnread(what, fmt.Sprintf("it gives %q", v), stderr)
	}
	return n
}

func maxBytesUnread(what, why string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "sqsinbox: cannot read %s's MaximumMessageSize (%s); using %s\n", what, why, bytesText(defaultMaxBytes))
	return defaultMaxBytes
}
