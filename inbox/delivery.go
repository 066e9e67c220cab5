package inbox

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// Delivery says how an event reached its handler. The inbox records it in the event's row with
// the claim, for an operator's lookup ([Inbox.Lookup], [Inbox.List], `sqsinbox events show`); it
// changes nothing else. Every field is optional. The worker's inbox handlers fill it from each
// SQS message; a caller of [Inbox.Run] passes it with [WithDelivery], a caller of
// [Inbox.RunBatch] in [Item].Delivery.
type Delivery struct {
	// MessageID is the SQS message id. SQS's ids are UUIDs, stored in 16 bytes; an id of another
	// form is not recorded.
	MessageID string
	// Queue is the name of the queue the message came from.
	Queue string
	// ReceiveCount is the message's ApproximateReceiveCount: 1 on its first delivery.
	ReceiveCount int
	// TraceID is the trace the message carried (W3C trace context, or X-Ray's): 32 hex digits,
	// stored in 16 bytes; another form is not recorded.
	TraceID string
}

type deliveryCtxKey struct{}

// WithDelivery returns ctx carrying d, for [Inbox.Run] and [Inbox.RunTx] to record with the
// claim.
func WithDelivery(ctx context.Context, d Delivery) context.Context {
	return context.WithValue(ctx, deliveryCtxKey{}, d)
}

func deliveryFrom(ctx context.Context) Delivery {
	d, _ := ctx.Value(deliveryCtxKey{}).(Delivery)
	return d
}

// deliveryArgs are a Delivery as the claim's bound parameters: NULL where a field is absent or
// not of the form stored.
type deliveryArgs struct {
	source       pgtype.Int4
	messageID    pgtype.UUID
	receiveCount pgtype.Int2
	traceID      []byte
}

// deliveryArgs never fails: a source that cannot be registered now (the database is down, and
// the claim will say so in its own words) is left out of this row and tried again at the next
// claim. What a row records for operators must never stop an event's processing.
func (ib *Inbox) deliveryArgs(ctx context.Context, d Delivery) deliveryArgs {
	var a deliveryArgs
	if src, err := ib.sources.id(ctx, ib, d.Queue); err == nil {
		a.source = pgtype.Int4{Int32: src, Valid: true}
	}
	if id, ok := parseUUID(d.MessageID); ok {
		a.messageID = pgtype.UUID{Bytes: id, Valid: true}
	}
	if d.ReceiveCount > 0 {
		a.receiveCount = pgtype.Int2{Int16: int16(min(d.ReceiveCount, 1<<15-1)), Valid: true}
	}
	a.traceID = parseTraceID(d.TraceID)
	return a
}

// parseUUID reads a UUID in its 36-character text form, without allocating.
func parseUUID(s string) ([16]byte, bool) {
	var id [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, false
	}
	j := 0
	for i := 0; i < 36; i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i--
			continue
		}
		b, ok := hexByte(s[i], s[i+1])
		if !ok {
			return id, false
		}
		id[j] = b
		j++
	}
	return id, true
}

// hexByte is the byte two hex digits spell.
func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := hexDigit(hi)
	l, ok2 := hexDigit(lo)
	return h<<4 | l, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseTraceID reads 32 hex digits into the 16 bytes stored.
func parseTraceID(s string) []byte {
	if len(s) != 32 {
		return nil
	}
	b := make([]byte, 16)
	for i := range b {
		v, ok := hexByte(s[2*i], s[2*i+1])
		if !ok {
			return nil
		}
		b[i] = v
	}
	return b
}

// formatUUID is the text form of a UUID.
func formatUUID(u pgtype.UUID) string {
	if !u.Valid {
		return ""
	}
	h := hex.EncodeToString(u.Bytes[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// sources registers each (queue, instance) this process claims from in inbox_sources once, and
// keeps the ids, so that a claim costs no round trip for it after the first of each queue, and
// no lock: the map is replaced, never changed, and read without one. Registrations run without
// the lock too (two at once for one queue are harmless), so a database that is down slows each
// claim once, not all of them in a line.
type sources struct {
	ids      atomic.Pointer[map[string]int32]
	mu       sync.Mutex // guards instance and the replacing of ids
	instance string     // resolved at the first registration
}

func (s *sources) id(ctx context.Context, ib *Inbox, queue string) (int32, error) {
	if m := s.ids.Load(); m != nil {
		if id, ok := (*m)[queue]; ok {
			return id, nil
		}
	}
	s.mu.Lock()
	if s.instance == "" {
		s.instance = ib.cfg.Instance
		if s.instance == "" {
			s.instance = DefaultInstance(ctx)
		}
	}
	instance := s.instance
	s.mu.Unlock()
	// DO UPDATE, not DO NOTHING: it returns the id of a row another process inserted
	// concurrently, which DO NOTHING's snapshot would not see.
	var id int32
	err := ib.pool.QueryRow(ctx, "INSERT INTO "+sqlident.Quote(ib.cfg.Schema, "inbox_sources")+" (queue, instance) VALUES ($1, $2) "+
		"ON CONFLICT (queue, instance) DO UPDATE SET queue = EXCLUDED.queue RETURNING id", queue, instance).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("recording the source (queue %q, instance %q): %w", queue, instance, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int32{}
	if old := s.ids.Load(); old != nil {
		m = maps.Clone(*old)
	}
	m[queue] = id
	s.ids.Store(&m)
	return id, nil
}

// envECSMetadata names the variable ECS sets in every container of a task: the base URL of the
// task metadata endpoint (version 4).
const envECSMetadata = "ECS_CONTAINER_METADATA_URI_V4"

// DefaultInstance names this process for [Config.Instance]: the ECS task's ARN when the process
// runs in an ECS task (read from the task metadata endpoint, within 2 s), else the hostname, else
// "unknown".
func DefaultInstance(ctx context.Context) string {
	if uri := os.Getenv(envECSMetadata); uri != "" {
		if arn, err := ecsTaskARN(ctx, uri); err == nil && arn != "" {
			return arn
		}
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "unknown"
}

func ecsTaskARN(ctx context.Context, uri string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(uri, "/")+"/task", nil)
	if err != nil {
		return "", err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("ECS task metadata: %s", res.Status)
	}
	var task struct {
		TaskARN string `json:"TaskARN"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, res.Body, 1<<20)).Decode(&task); err != nil {
		return "", err
	}
	return task.TaskARN, nil
}
