package s3payload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// GetObjectAPI is the part of the S3 API a [Reader] uses. Its method copies the signature of
// *s3.Client exactly, so an *s3.Client satisfies it with no adapter.
type GetObjectAPI interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

const (
	// DefaultMaxPayload is ReaderConfig.MaxPayload's default: 64 MiB.
	DefaultMaxPayload = 64 << 20
	// DefaultMaxHeld is ReaderConfig.MaxHeld's default: 256 MiB.
	DefaultMaxHeld = 256 << 20
	// DefaultFetchConcurrency is ReaderConfig.Concurrency's default.
	DefaultFetchConcurrency = 10
)

// ReaderConfig configures a [Reader].
type ReaderConfig struct {
	// S3 reads the objects. Required.
	S3 GetObjectAPI
	// Buckets are the buckets the reader may read. A message that points to any other is
	// refused (an error that names the bucket and key; the message goes the retry-then-DLQ
	// way), so that a message can never make the worker read an arbitrary object. Required.
	Buckets []string
	// MaxPayload is the largest payload, in bytes, the reader fetches: a message whose size
	// attribute or object says more is refused. 0 means DefaultMaxPayload (64 MiB).
	MaxPayload int64
	// MaxHeld bounds the bytes of payloads held at once, from their fetch until their handler
	// is done: a fetch waits for room. Each handler call's messages take their payloads' total
	// at once, so a call whose total exceeds MaxHeld takes all of it and runs alone. 0 means
	// DefaultMaxHeld (256 MiB); it must be at least MaxPayload.
	MaxHeld int64
	// Concurrency is the number of objects one handler call's messages fetch at once. 0 means
	// DefaultFetchConcurrency (10).
	Concurrency int
}

// Reader fetches offloaded payloads for the worker: set it as worker.Config.Payloads. It is safe
// for concurrent use.
type Reader struct {
	s3      GetObjectAPI
	buckets map[string]bool
	max     int64
	held    int64
	conc    int
	sem     *semaphore.Weighted
}

// NewReader returns a Reader, or an error that names the configuration field at fault.
func NewReader(cfg ReaderConfig) (*Reader, error) {
	r := &Reader{s3: cfg.S3, buckets: map[string]bool{}, max: cfg.MaxPayload, held: cfg.MaxHeld, conc: cfg.Concurrency}
	if r.max == 0 {
		r.max = DefaultMaxPayload
	}
	if r.held == 0 {
		r.held = max(DefaultMaxHeld, r.max)
	}
	if r.conc == 0 {
		r.conc = DefaultFetchConcurrency
	}
	switch {
	case cfg.S3 == nil:
		return nil, errors.New("s3payload: ReaderConfig.S3 is nil")
	case len(cfg.Buckets) == 0:
		return nil, errors.New("s3payload: ReaderConfig.Buckets is empty; name the buckets the worker may read payloads from")
	case r.max < 0:
		return nil, fmt.Errorf("s3payload: ReaderConfig.MaxPayload is %d; it must be positive (0 means %d)", cfg.MaxPayload, DefaultMaxPayload)
	case r.held < r.max:
		return nil, fmt.Errorf("s3payload: ReaderConfig.MaxHeld is %d; it must be at least MaxPayload (%d)", r.held, r.max)
	case r.conc < 0:
		return nil, fmt.Errorf("s3payload: ReaderConfig.Concurrency is %d; it must be positive (0 means %d)", cfg.Concurrency, DefaultFetchConcurrency)
	}
	for _, b := range cfg.Buckets {
		if err := ValidateBucket(b); err != nil {
			return nil, fmt.Errorf("s3payload: ReaderConfig.Buckets: %w", err)
		}
		r.buckets[b] = true
	}
	r.sem = semaphore.NewWeighted(r.held)
	return r, nil
}

// FetchError is why an offloaded payload could not be fetched. It names the object.
type FetchError struct {
	Pointer Pointer
	Err     error
}

func (e *FetchError) Error() string { return "s3payload: " + e.Pointer.String() + ": " + e.Err.Error() }
func (e *FetchError) Unwrap() error { return e.Err }

// Errors a [FetchError] wraps.
var (
	// ErrBucketNotAllowed: the pointer names a bucket not in ReaderConfig.Buckets.
	ErrBucketNotAllowed = errors.New("the bucket is not among the reader's allowed buckets (ReaderConfig.Buckets)")
	// ErrNoObject: the object (or its bucket) does not exist.
	ErrNoObject = errors.New("no such object")
	// ErrTooLarge: the payload is over ReaderConfig.MaxPayload.
	ErrTooLarge = errors.New("the payload is over the reader's bound (ReaderConfig.MaxPayload)")
	// ErrSizeMismatch: the object's size is not the one the message's size attribute gives.
	ErrSizeMismatch = errors.New("the object's size differs from the message's size attribute")
)

// Ref is what an offloaded message carries of its payload: the pointer body ([ParsePointer]) and
// the value of its reserved size attribute ([SizeAttribute] or [LegacySizeAttribute]), the
// payload's size in bytes.
type Ref struct {
	Body []byte
	Size string
}

// Payload is what [Reader.Fetch] made of one [Ref]: the payload and the object it came from, or
// why it could not be fetched.
type Payload struct {
	// Data is the payload; nil when Err is set.
	Data []byte
	// From is the object the payload came from, as an S3 URI (s3://bucket/key); empty when the
	// body is not a pointer.
	From string
	// Err is why the payload could not be fetched: a *FetchError, or (when the body is not a
	// pointer) an error that wraps ErrMalformedPointer.
	Err error
}

// Fetch fetches the payloads refs point to, ReaderConfig.Concurrency objects at a time;
// payloads[i] is refs[i]'s. The payloads hold room against ReaderConfig.MaxHeld from their fetch
// until release is called (once they are no longer needed; a second call does nothing); a fetch
// waits for room until ctx ends. release is never nil.
func (r *Reader) Fetch(ctx context.Context, refs []Ref) (payloads []Payload, release func()) {
	payloads = make([]Payload, len(refs))
	type job struct {
		i    int
		p    Pointer
		size int64
	}
	var jobs []*job
	var total int64
	for i, ref := range refs {
		p, err := ParsePointer(ref.Body)
		if err != nil {
			payloads[i].Err = err
			continue
		}
		payloads[i].From = p.String()
		size, err := strconv.ParseInt(ref.Size, 10, 64)
		switch {
		case !r.buckets[p.Bucket]:
			payloads[i].Err = &FetchError{p, ErrBucketNotAllowed}
			continue
		case err != nil || size < 0:
			payloads[i].Err = &FetchError{p, fmt.Errorf("the message's size attribute is %q; want a whole number of bytes", ref.Size)}
			continue
		case size > r.max:
			payloads[i].Err = &FetchError{p, fmt.Errorf("%w: the message says %d bytes; the bound is %d", ErrTooLarge, size, r.max)}
			continue
		}
		jobs = append(jobs, &job{i: i, p: p, size: size})
		total += size
	}
	if len(jobs) == 0 {
		return payloads, func() {}
	}
	hold := min(total, r.held)
	if err := r.sem.Acquire(ctx, hold); err != nil {
		for _, j := range jobs {
			payloads[j.i].Err = &FetchError{j.p, fmt.Errorf("waiting for room among the payloads held (ReaderConfig.MaxHeld %d): %w", r.held, err)}
		}
		return payloads, func() {}
	}
	var once sync.Once
	release = func() { once.Do(func() { r.sem.Release(hold) }) }

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.conc)
	for _, j := range jobs {
		g.Go(func() error {
			// One failure does not stop the others: each records its own.
			payloads[j.i].Data, payloads[j.i].Err = r.fetchOne(gctx, j.p, j.size)
			return nil
		})
	}
	_ = g.Wait()
	return payloads, release
}

// fetchOne reads one object of size bytes, or returns a *FetchError.
func (r *Reader) fetchOne(ctx context.Context, p Pointer, size int64) ([]byte, error) {
	data, err := r.get(ctx, p, size)
	if err != nil {
		return nil, &FetchError{p, err}
	}
	return data, nil
}

// get reads one object of size bytes.
func (r *Reader) get(ctx context.Context, p Pointer, size int64) ([]byte, error) {
	out, err := r.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(p.Bucket), Key: aws.String(p.Key)})
	if err != nil {
		var nk *types.NoSuchKey
		var nb *types.NoSuchBucket
		if errors.As(err, &nk) || errors.As(err, &nb) {
			return nil, fmt.Errorf("%w: %w", ErrNoObject, err)
		}
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() == "AccessDenied" {
			// Without s3:ListBucket, S3 answers a missing key with 403, not 404.
			return nil, fmt.Errorf("access denied: the worker lacks s3:GetObject on it, or the object is gone (expired early?) and S3 hides that from a reader without s3:ListBucket: %w", err)
		}
		return nil, fmt.Errorf("GetObject: %w", err)
	}
	defer out.Body.Close()
	if n := aws.ToInt64(out.ContentLength); out.ContentLength != nil && n != size {
		if n > r.max {
			return nil, fmt.Errorf("%w: the object is %d bytes; the bound is %d", ErrTooLarge, n, r.max)
		}
		return nil, fmt.Errorf("%w: the object is %d bytes, the attribute says %d", ErrSizeMismatch, n, size)
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, size+1))
	if err != nil {
		return nil, fmt.Errorf("reading the object: %w", err)
	}
	if int64(len(data)) != size {
		return nil, fmt.Errorf("%w: the object has %s bytes, the attribute says %d", ErrSizeMismatch, moreThan(len(data), size), size)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

func moreThan(n int, size int64) string {
	if int64(n) > size {
		return "more than " + strconv.FormatInt(size, 10)
	}
	return strconv.Itoa(n)
}

// ValidateBucket checks that name is a valid S3 bucket name (3 to 63 characters of a-z, 0-9, '.'
// and '-', starting and ending with a letter or digit).
func ValidateBucket(name string) error {
	if len(name) < 3 || len(name) > 63 {
		return fmt.Errorf("bucket name %q: want 3 to 63 characters", name)
	}
	for i := range len(name) {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' {
			return fmt.Errorf("bucket name %q: character %q at %d; want a-z, 0-9, '.' and '-'", name, c, i)
		}
	}
	if !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return fmt.Errorf("bucket name %q: it must start and end with a letter or digit", name)
	}
	return nil
}

func alnum(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') }

// Buckets returns the buckets the reader may read, sorted.
func (r *Reader) Buckets() []string { return slices.Sorted(maps.Keys(r.buckets)) }
