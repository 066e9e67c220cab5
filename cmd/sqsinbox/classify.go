package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// The classifier of `redrive --handler H` / `--route TYPE=H` and of the console's redrive: it
// sorts each dead-lettered message by what the inbox says of its event, as the worker would
// find it (the same SNS unwrapping, the same payload fetch, the same type routing and key).

// class is what a classified redrive does with a dead-lettered message.
type class int

const (
	classMove    class = iota // never applied by its handler: back to the queue
	classApplied              // already applied: its effect committed; delete it from the DLQ
	classLeave                // its handler or key is unknown, or moving it is unsafe: left in the DLQ
)

// maxQueueRetention is SQS's largest MessageRetentionPeriod, assumed for a destination whose own
// cannot be read.
const maxQueueRetention = 14 * 24 * time.Hour

// classifyFlags are the flags the classified redrive shares between `redrive` and `console`: the
// payload fetch and the inbox's retention.
type classifyFlags struct {
	payloadBuckets string
	payloadMax     int64
	retention      string
}

func (f *classifyFlags) register(fs *flags) {
	fs.StringVar(&f.payloadBuckets, "payload-buckets", "", "the classified redrive (--handler, --route, the console's): the S3 buckets (comma-separated) that offloaded payloads "+
		"are fetched from to find their key, as the worker does (default $SQSINBOX_PAYLOAD_BUCKETS, the worker's variable); "+
		"without any, an offloaded message whose attributes give no key is left in the DLQ")
	fs.Int64Var(&f.payloadMax, "payload-max-bytes", 0, "the largest payload fetched (default $SQSINBOX_PAYLOAD_MAX_BYTES, else 64 MiB)")
	fs.StringVar(&f.retention, "inbox-retention", "28d", "the classified redrive (--handler, --route, the console's): how long the inbox keeps its rows (purge --older-than); "+
		"a message older than this less the destination's MessageRetentionPeriod is not moved (see --allow-old)")
}

// payloadReader returns the fetcher of --payload-buckets (or $SQSINBOX_PAYLOAD_BUCKETS), or nil
// when no bucket is named: the worker's reader, with the same bucket allow-list and bound.
func (f *classifyFlags) payloadReader(ctx context.Context, getenv func(string) string, timeout time.Duration) (worker.PayloadFetcher, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	list := cmp.Or(f.payloadBuckets, getenv("SQSINBOX_PAYLOAD_BUCKETS"))
	var buckets []string
	for b := range strings.SplitSeq(list, ",") {
		if b = strings.TrimSpace(b); b != "" {
			buckets = append(buckets, b)
		}
	}
	if len(buckets) == 0 {
		return nil, nil
	}
	maxBytes := f.payloadMax
	if v := getenv("SQSINBOX_PAYLOAD_MAX_BYTES"); maxBytes == 0 && v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: SQSINBOX_PAYLOAD_MAX_BYTES is %q; want a positive number of bytes", errUsage, v)
		}
		maxBytes = n
	}
	if maxBytes < 0 {
		return nil, fmt.Errorf("%w: --payload-max-bytes %d: want a positive number of bytes", errUsage, maxBytes)
	}
	cfg, err := awsConfig(ctx, timeout)
	if err != nil {
		return nil, err
	}
	c := newS3(cfg, timeout)
	r, err := s3payload.NewReader(s3payload.ReaderConfig{S3: c, Buckets: buckets, MaxPayload: maxBytes})
	if err != nil {
		return nil, fmt.Errorf("%w: --payload-buckets: %w", errUsage, err)
	}
	return r, nil
}

// inboxRetention reads --inbox-retention.
func (f *classifyFlags) inboxRetention() (time.Duration, error) {
	d, err := parseAge(f.retention)
	if err != nil {
		return 0, fmt.Errorf("--inbox-retention: %w", err)
	}
	return d, nil
}

// classifierConfig is what a classifier sorts by.
type classifierConfig struct {
	// handler classifies every message against one handler's rows; "" when routes are given.
	handler string
	// routes maps a message type to the handler a Router sends it to (--route TYPE=HANDLER).
	routes map[string]string
	// types reads a message's type, as the queue's Router does.
	types inboxhandler.RouterConfig
	// oneHandler says that the queue's worker published one handler (inbox.Routes.Handler): every
	// message goes to it, whatever its type, so a type does not keep a message from being deleted.
	oneHandler bool
	// typeFunc says that the queue's Router reads the type with a function of its program
	// (RouterConfig.TypeOf), so that no type can be read here: with --handler, every message is
	// moved rather than deleted.
	typeFunc bool
	// noRoute ends the reason of a message whose type has no route, naming where the routes came
	// from ("has no --route" when empty).
	noRoute string
	// published are the routes the queue's worker published, when the routes or the type's
	// source come from them.
	published *inbox.PublishedRoutes
	// key is where the handlers take their event key.
	key keySpec
	// payloads fetches offloaded payloads; nil leaves an offloaded message whose attributes give
	// no key.
	payloads worker.PayloadFetcher
	// retention is the inbox's; allowOld moves messages too old for it anyway.
	retention time.Duration
	allowOld  bool

	dryRun, keepApplied bool
}

// classifier sorts a DLQ's messages against the inbox, and counts them.
type classifier struct {
	classifierConfig
	ib *inbox.Inbox
	// dest and destRetention are the destination queue's name and MessageRetentionPeriod (set by
	// destination).
	dest          string
	destRetention time.Duration
	now           func() time.Time

	counts  [3]int
	samples [3][]string
	why     [3]map[string]int // why messages of each class were left, or moved rather than deleted
}

// newClassifier returns the classifier of `redrive --handler/--route` (and of the console's
// redrive). One lookup first names an unmigrated schema at once, rather than as the reason every
// message is left in the DLQ.
func (db *dbFlags) newClassifier(ctx context.Context, ib *inbox.Inbox, cfg classifierConfig) (*classifier, error) {
	if _, err := ib.Lookup(ctx, "sqsinbox-redrive-probe"); err != nil {
		return nil, db.inboxError(err)
	}
	if cfg.key.fn == nil {
		cfg.key = defaultKeySpec
	}
	if cfg.retention == 0 {
		cfg.retention = inbox.DefaultRetention
	}
	return &classifier{classifierConfig: cfg, ib: ib, now: time.Now, destRetention: maxQueueRetention}, nil
}

// parseRoutes reads TYPE=HANDLER pairs (--route, or the console's routes field).
func parseRoutes(pairs []string) (map[string]string, error) {
	routes := map[string]string{}
	for _, p := range pairs {
		typ, h, ok := strings.Cut(p, "=")
		typ, h = strings.TrimSpace(typ), strings.TrimSpace(h)
		switch {
		case !ok || typ == "":
			return nil, fmt.Errorf("%w: route %q: want TYPE=HANDLER", errUsage, p)
		case routes[typ] != "":
			return nil, fmt.Errorf("%w: route %q: type %q is routed to %s already", errUsage, p, typ, routes[typ])
		}
		if err := inbox.ValidateHandler(h); err != nil {
			return nil, fmt.Errorf("%w: route %q: %w", errUsage, p, err)
		}
		routes[typ] = h
	}
	return routes, nil
}

// usePublished fills what cc lacks from p, the routes the queue's worker published (nil: none):
// the routes, when neither a handler nor routes were given, and where a message's type is read,
// unless typeGiven (--type-attribute or --type-field, or the console's fields, were given).
func (cc *classifierConfig) usePublished(p *inbox.PublishedRoutes, typeGiven bool) error {
	if p == nil {
		return nil
	}
	cc.published = p
	if p.Handler != "" {
		// One handler, no type: --route overrides it, as it would a router's routes.
		if len(cc.routes) == 0 {
			cc.handler = cmp.Or(cc.handler, p.Handler)
			cc.oneHandler = true
		}
		return nil
	}
	if cc.handler == "" && len(cc.routes) == 0 {
		cc.routes = maps.Clone(p.Routes.Routes)
		cc.noRoute = "has no route among those the worker published"
	}
	if !typeGiven {
		cc.types = inboxhandler.RouterConfig{TypeAttribute: p.TypeAttribute, TypeField: p.TypeField}
		cc.typeFunc = p.TypeFunc
	}
	if cc.typeFunc && cc.handler == "" {
		return fmt.Errorf("%w: the worker of queue %s reads a message's type with a function of its own (RouterConfig.TypeOf), "+
			"which cannot run here: give the type's attribute and body field as it reads them (--type-attribute, --type-field)", errUsage, p.Queue)
	}
	return nil
}

// publishedText describes the routes a worker published: their version, when, by which
// instance, and the version they replaced.
func publishedText(p *inbox.PublishedRoutes) string {
	s := fmt.Sprintf("routes published by queue %s's worker: version %s, since %s (instance %s; last started %s)", p.Queue, p.Version,
		p.PublishedAt.UTC().Format(time.RFC3339), p.Instance, p.ConfirmedAt.UTC().Format(time.RFC3339))
	if p.Previous != nil {
		s += fmt.Sprintf("; they replaced version %s (%s), published since %s", p.Previous.Version, publishedRoutesText(p.Previous.Routes),
			p.Previous.PublishedAt.UTC().Format(time.RFC3339))
	}
	return s
}

// publishedRoutesText lists a worker's published routes as TYPE=HANDLER, or names its one handler.
func publishedRoutesText(r inbox.Routes) string {
	if r.Handler != "" {
		return "every message to handler " + r.Handler
	}
	return routesText(r.Routes)
}

// typeSourceText says where a message's type is read.
func typeSourceText(rc inboxhandler.RouterConfig, typeFunc bool) string {
	if typeFunc {
		return "a function of the worker's program (RouterConfig.TypeOf)"
	}
	s := fmt.Sprintf("attribute %q", cmp.Or(rc.TypeAttribute, "type"))
	if rc.TypeField != "" {
		s += fmt.Sprintf(", else body field %q", rc.TypeField)
	}
	return s
}

// routesText lists routes as TYPE=HANDLER, sorted by type.
func routesText(routes map[string]string) string {
	var rs []string
	for _, t := range slices.Sorted(maps.Keys(routes)) {
		rs = append(rs, t+"="+routes[t])
	}
	return strings.Join(rs, ", ")
}

// describe names what the messages are classified against.
func (cl *classifier) describe() string {
	if cl.handler != "" && cl.oneHandler && cl.published != nil && cl.handler == cl.published.Handler {
		return "handler " + cl.handler + " (published by the worker, version " + cl.published.Version + ")"
	}
	if cl.handler != "" {
		return "handler " + cl.handler
	}
	s := "the routes " + routesText(cl.routes)
	if cl.published != nil && cl.noRoute != "" {
		s += " (published by the worker, version " + cl.published.Version + ")"
	}
	return s
}

// newS3 is the S3 client of the payloads (offloaded by send, fetched by redrive), with the
// timeout on each call.
func newS3(cfg aws.Config, timeout time.Duration) *s3.Client {
	return s3payload.NewClient(cfg, func(o *s3.Options) {
		ep := aws.ToString(o.BaseEndpoint)
		if ep == "" {
			ep = "https://s3." + o.Region + ".amazonaws.com"
		}
		o.APIOptions = append(o.APIOptions, callTimeout("S3", ep, timeout))
	})
}

// destination reads the destination queue's MessageRetentionPeriod, the time a moved copy may
// still be delivered; when it cannot be read, SQS's largest is assumed and said.
func (cl *classifier) destination(ctx context.Context, c *sqs.Client, url string, stderr io.Writer) {
	cl.dest = lastPart(url)
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMessageRetentionPeriod}})
	if err == nil {
		if s, perr := strconv.Atoi(out.Attributes["MessageRetentionPeriod"]); perr == nil && s > 0 {
			cl.destRetention = time.Duration(s) * time.Second
			return
		}
		err = fmt.Errorf("it gives MessageRetentionPeriod %q", out.Attributes["MessageRetentionPeriod"])
	}
	fmt.Fprintf(stderr, "queue %s: MessageRetentionPeriod unread (%s); assuming SQS's largest, %s\n", cl.dest, oneLine(err), days(maxQueueRetention))
}

// keySpec is a handler's key function, and the same with the body's sources refused, for an
// offloaded message whose payload is not fetched.
type keySpec struct {
	fn, attrOnly inboxhandler.KeyFunc
}

// errBodyNeeded is the key source that reads the body of a message whose payload is offloaded
// and not fetched: its key is unknown.
var errBodyNeeded = errors.New("the key is in the offloaded payload")

func needBody(*worker.Message) (string, error) { return "", errBodyNeeded }

var defaultKeySpec = keySpec{fn: inboxhandler.DefaultKey,
	attrOnly: inboxhandler.FirstKey(inboxhandler.KeyFromAttribute(inboxhandler.DefaultAttribute), needBody)}

// sampleSize is how many keys of each class the report shows.
const sampleSize = 3

// messageKey is a received message's event key as the worker takes it: the event_id attribute,
// else the body's "id", inside an SNS envelope too.
func messageKey(m types.Message) (string, error) { return messageKeyWith(m, inboxhandler.DefaultKey) }

// messageKeyWith is messageKey with the handler's own key function.
func messageKeyWith(m types.Message, key inboxhandler.KeyFunc) (string, error) {
	wm := workerMessage(m)
	if err := worker.UnwrapSNS(wm, worker.SNSAuto); err != nil {
		return "", err
	}
	return key(wm)
}

func workerMessage(m types.Message) *worker.Message {
	return &worker.Message{ID: aws.ToString(m.MessageId), Body: []byte(aws.ToString(m.Body)),
		Attributes: m.MessageAttributes, SystemAttributes: m.Attributes}
}

// parseKeyFlag reads --key: the key functions of inboxhandler, by name, tried in order. The SQS
// MessageId is not among them: a moved copy gets a new one, so a handler keyed by it would run
// the copy again whatever the inbox says.
func parseKeyFlag(v string) (keySpec, error) {
	var fns, attrOnly []inboxhandler.KeyFunc
	for part := range strings.SplitSeq(v, ",") {
		kind, arg, _ := strings.Cut(strings.TrimSpace(part), ":")
		switch {
		case kind == "default" && arg == "":
			fns = append(fns, inboxhandler.DefaultKey)
			attrOnly = append(attrOnly, defaultKeySpec.attrOnly)
		case kind == "attribute" && arg != "":
			fns = append(fns, inboxhandler.KeyFromAttribute(arg))
			attrOnly = append(attrOnly, inboxhandler.KeyFromAttribute(arg))
		case kind == "json" && arg != "":
			fns = append(fns, inboxhandler.KeyFromJSONField(arg))
			attrOnly = append(attrOnly, needBody)
		case kind == "body" && arg == "":
			fns = append(fns, inboxhandler.KeyFromBody)
			attrOnly = append(attrOnly, needBody)
		case kind == "sns-message-id" && arg == "":
			fns = append(fns, inboxhandler.KeyFromSNSMessageID)
			attrOnly = append(attrOnly, inboxhandler.KeyFromSNSMessageID)
		default:
			return keySpec{}, fmt.Errorf("%w: --key %q: %q is not default, attribute:NAME, json:FIELD, body or sns-message-id "+
				"(the SQS MessageId cannot be: a moved copy gets a new one)", errUsage, v, part)
		}
	}
	if len(fns) == 1 {
		return keySpec{fns[0], attrOnly[0]}, nil
	}
	return keySpec{inboxhandler.FirstKey(fns...), inboxhandler.FirstKey(attrOnly...)}, nil
}

// classify sorts m: its handler (the one --handler names, or its type's --route), its key (from
// its attributes, or from its body, fetched from S3 first where it is offloaded), and whether
// that handler applied that key. Only a message whose own handler applied its own key is
// deleted; one whose handler or key is unknown is left in the DLQ with the reason.
func (cl *classifier) classify(ctx context.Context, m types.Message) class {
	id := aws.ToString(m.MessageId)
	wm := workerMessage(m)
	if err := worker.UnwrapSNS(wm, worker.SNSAuto); err != nil {
		return cl.count(classLeave, id, "no valid key: "+err.Error())
	}
	bodyKnown := true
	if _, offloaded := wm.OffloadedSize(); offloaded {
		if cl.payloads == nil {
			bodyKnown = false
		} else {
			size, _ := wm.OffloadedSize()
			got, release := cl.payloads.Fetch(ctx, []s3payload.Ref{{Body: wm.Body, Size: size}})
			defer release()
			if len(got) != 1 || got[0].Err != nil {
				err := errors.New("no answer")
				if len(got) == 1 {
					err = got[0].Err
				}
				return cl.count(classLeave, id, "offloaded: the payload could not be fetched: "+errText(err))
			}
			// Keyed from the payload, as the worker keys it once fetched.
			wm.Body = got[0].Data
		}
	}
	handler, typed, why := cl.handlerOf(wm, bodyKnown)
	if why != "" {
		return cl.count(classLeave, id, why)
	}
	keyFn := cl.key.fn
	if !bodyKnown {
		keyFn = cl.key.attrOnly
	}
	key, err := keyFn(wm)
	switch {
	case errors.Is(err, errBodyNeeded):
		return cl.count(classLeave, id, "offloaded: key unknown without the payload (--payload-buckets fetches it as the worker does)")
	case err != nil:
		return cl.count(classLeave, id, "no valid key: "+err.Error())
	}
	found, err := cl.ib.Lookup(ctx, key)
	if err != nil {
		return cl.count(classLeave, key, "the inbox could not be asked: "+err.Error())
	}
	applied := slices.ContainsFunc(found, func(p inbox.ProcessedEvent) bool { return p.Handler == handler })
	note := ""
	switch {
	case applied && typed != "":
		sorts := "--route TYPE=HANDLER sorts it"
		if cl.published != nil {
			sorts = "without --handler, the routes the worker published sort it"
		}
		note = fmt.Sprintf("applied by %s, but it carries a type (%s): --handler alone cannot tell whether %s is the handler "+
			"of its type, so it is moved rather than deleted (the inbox absorbs it if it was applied); %s", handler, typed, handler, sorts)
	case applied:
		return cl.count(classApplied, key, "")
	}
	if why := cl.tooOld(m); why != "" {
		return cl.count(classLeave, key, why)
	}
	return cl.count(classMove, key, note)
}

// handlerOf is the handler m is classified against. With --route, that of its type; a message
// with no type, or a type with no route, has none (why says so). With --handler alone, that one;
// typed describes the type m carries, if any: the queue may be a router's, where the same key
// under another type is another event, so such a message is never deleted on --handler's word.
func (cl *classifier) handlerOf(m *worker.Message, bodyKnown bool) (handler, typed, why string) {
	if cl.oneHandler {
		return cl.handler, "", "" // the queue's worker runs this one handler: the type does not matter
	}
	if cl.typeFunc {
		if cl.handler == "" {
			return "", "", "type unreadable here (the worker reads it with RouterConfig.TypeOf)"
		}
		return cl.handler, "unknown here (the worker reads it with RouterConfig.TypeOf)", ""
	}
	rc := cl.types
	if !bodyKnown {
		rc.TypeField = "" // the body is a pointer: only the attribute can be read
	}
	typ, err := rc.MessageType(m)
	attr := cmp.Or(cl.types.TypeAttribute, "type")
	if err != nil {
		if cl.handler == "" {
			return "", "", "type unreadable: " + err.Error()
		}
		typ = "unreadable"
	}
	if typ == "" && !bodyKnown && cl.types.TypeField != "" {
		if cl.handler == "" {
			return "", "", fmt.Sprintf("offloaded: type unknown without the payload (no %q attribute; --payload-buckets fetches it)", attr)
		}
		typ = "unknown: offloaded"
	}
	if cl.handler != "" {
		if typ != "" {
			typed = fmt.Sprintf("%q", typ)
		}
		return cl.handler, typed, ""
	}
	if typ == "" {
		what := fmt.Sprintf("attribute %q", attr)
		if cl.types.TypeField != "" {
			what += fmt.Sprintf(", body field %q", cl.types.TypeField)
		}
		return "", "", "no type (" + what + "), so no route"
	}
	h, ok := cl.routes[typ]
	if !ok {
		return "", "", fmt.Sprintf("type %q %s", typ, cmp.Or(cl.noRoute, "has no --route"))
	}
	return h, "", ""
}

// tooOld says why m must not be moved, or "": a copy restarts SQS's retention, so it may be
// delivered up to the destination's MessageRetentionPeriod from now. A message sent longer ago
// than the inbox's retention less that period could then come after the inbox forgot an event
// applied when it was sent, and run again.
func (cl *classifier) tooOld(m types.Message) string {
	if cl.allowOld {
		return ""
	}
	horizon := cl.retention - cl.destRetention
	ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
	if err != nil {
		return "no SentTimestamp: its age is unknown, so its copy could outlive its inbox row (--allow-old moves it anyway)"
	}
	if age := cl.now().Sub(time.UnixMilli(ms)); age <= horizon {
		return ""
	}
	return fmt.Sprintf("older than the inbox's retention (%s) less %s's MessageRetentionPeriod (%s): its copy could be delivered "+
		"after the inbox forgets its event (--allow-old moves it anyway)", days(cl.retention), cl.dest, days(cl.destRetention))
}

// days shows a duration in days where it is whole ones.
func days(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func (cl *classifier) count(c class, sample, why string) class {
	cl.counts[c]++
	if len(cl.samples[c]) < sampleSize {
		cl.samples[c] = append(cl.samples[c], sample)
	}
	if why != "" {
		if cl.why[c] == nil {
			cl.why[c] = map[string]int{}
		}
		cl.why[c][firstLine(why)]++
	}
	return c
}

func (cl *classifier) progress() string {
	return fmt.Sprintf("%d to move, %d already applied, %d left", cl.counts[classMove], cl.counts[classApplied], cl.counts[classLeave])
}

// report prints the counts of each class, a sample of each, and why messages were left or moved
// rather than deleted.
func (cl *classifier) report(w io.Writer, fromURL, toURL string) {
	verb := map[bool]string{true: "would be", false: "were"}[cl.dryRun]
	applied := "deleted from the DLQ"
	if cl.keepApplied {
		applied = "left in the DLQ (--keep-applied)"
	}
	fmt.Fprintf(w, "%s against %s's inbox rows%s:\n", lastPart(fromURL), cl.describe(), map[bool]string{true: " (dry run: nothing changed)", false: ""}[cl.dryRun])
	if cl.published != nil {
		fmt.Fprintf(w, "  %s\n", publishedText(cl.published))
	}
	if (cl.handler == "" || cl.published != nil) && !cl.oneHandler {
		fmt.Fprintf(w, "  type read from %s\n", typeSourceText(cl.types, cl.typeFunc))
	}
	fmt.Fprintf(w, "  never applied: %d (%s moved to %s) %v\n", cl.counts[classMove], verb, lastPart(toURL), cl.samples[classMove])
	cl.reasons(w, classMove)
	fmt.Fprintf(w, "  already applied: %d (%s %s) %v\n", cl.counts[classApplied], verb, applied, cl.samples[classApplied])
	fmt.Fprintf(w, "  left in the DLQ: %d %v\n", cl.counts[classLeave], cl.samples[classLeave])
	cl.reasons(w, classLeave)
}

func (cl *classifier) reasons(w io.Writer, c class) {
	for _, why := range slices.Sorted(maps.Keys(cl.why[c])) {
		fmt.Fprintf(w, "    %d: %s\n", cl.why[c][why], why)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
