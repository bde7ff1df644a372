package objstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// S3 defaults.
const (
	DefaultS3MaxAttempts = 10
	DefaultS3PartSize    = 64 << 20
	// MinS3PartSize is S3's smallest allowed multipart part (but the last).
	MinS3PartSize = 5 << 20
	// DefaultS3MaxBackoff caps the exponential backoff between attempts.
	// The SDK's 20 s kept an fsync waiting up to 20 s after the store came
	// back; with jitter, 5 s is still no hammering of a throttling store.
	DefaultS3MaxBackoff = 5 * time.Second

	s3DeleteBatch    = 1000
	s3ListMax        = 1000
	s3PartWorkers    = 4
	s3HeaderTimeout  = 2 * time.Minute
	s3IdleConnsPerHo = 64
)

// S3Config configures an S3 store. Zero values mean the documented default.
type S3Config struct {
	// Bucket must exist.
	Bucket string
	// Prefix is prepended to every key ("fs1" and "fs1/" both mean keys
	// live under "fs1/"); empty means the bucket root.
	Prefix string
	// Endpoint is a custom S3 endpoint URL ("http://127.0.0.1:7070"); empty
	// means AWS.
	Endpoint string
	// Region defaults to the SDK's configuration (AWS_REGION, profile), else
	// us-east-1.
	Region string
	// PathStyle addresses buckets as endpoint/bucket/key (needed by most
	// self-hosted servers) instead of bucket.endpoint/key.
	PathStyle bool
	// MaxAttempts bounds the attempts per request (default 10).
	MaxAttempts int
	// MaxBackoff caps the delay between attempts (default 5 s).
	MaxBackoff time.Duration
	// ResponseTimeout bounds the wait for a response's headers once a
	// request is sent (default 2 min). A request that runs out of it is
	// retried like a refused connection.
	ResponseTimeout time.Duration
	// PartSize is the multipart part size; objects larger than it are
	// uploaded in parts (default 64 MiB, at least 5 MiB).
	PartSize int64
	// AccessKeyID and SecretAccessKey, when both set, are used instead of
	// the SDK's default credential chain (environment, shared config,
	// instance role).
	AccessKeyID     string
	SecretAccessKey string
	// Profile names a shared configuration profile whose credentials and
	// settings are used ("" : AWS_PROFILE or the default).
	Profile string
}

// S3 is a Store on an S3 bucket (aws-sdk-go-v2).
//
// Retries happen in two layers. Each request is retried inside the SDK
// (standard retryer, MaxAttempts attempts with exponential jittered backoff
// capped at MaxBackoff, no retry quota) on throttling, 5xx, timeouts and
// connection errors including refused and reset connections; with the
// defaults that rides out roughly half a minute to a minute of outage.
// Conditional Puts are not retried by the SDK but by S3 itself, in the same
// way, so that a retry after a lost response can be recognised (see Put).
// When the attempts run out the error wraps ErrUnavailable, and the caller's
// own loop (durability barrier, uploader, reclamation cycle) retries later:
// that is the layer that bridges long outages.
type S3 struct {
	cli      *s3.Client
	bucket   string
	prefix   string
	partSize int64
	attempts int
	backoff  *retry.ExponentialJitterBackoff
	retryer  aws.Retryer
	endpoint string // as configured ("" for AWS)
	region   string // in use
}

var _ Store = (*S3)(nil)

func isConnErr(err error) aws.Ternary {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return aws.TrueTernary
	}
	return aws.UnknownTernary
}

// NewS3 returns an S3 store. It sends no request.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("objstore: s3 needs a bucket")
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultS3MaxAttempts
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultS3MaxBackoff
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultS3PartSize
	}
	if cfg.PartSize < MinS3PartSize {
		return nil, fmt.Errorf("objstore: s3 part size %d is below the S3 minimum of %d", cfg.PartSize, MinS3PartSize)
	}
	if (cfg.AccessKeyID == "") != (cfg.SecretAccessKey == "") {
		return nil, errors.New("objstore: s3 access key and secret must be given together")
	}
	newRetryer := func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = cfg.MaxAttempts
			o.MaxBackoff = cfg.MaxBackoff
			o.RateLimiter = ratelimit.None
			o.Retryables = append(o.Retryables, retry.IsErrorRetryableFunc(isConnErr))
		})
	}
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConnsPerHost = s3IdleConnsPerHo
		tr.ResponseHeaderTimeout = cmp.Or(cfg.ResponseTimeout, s3HeaderTimeout)
	})
	opts := []func(*config.LoadOptions) error{
		config.WithRetryer(newRetryer),
		config.WithHTTPClient(httpClient),
		// The SDK's own log lines (the IMDSv1 fallback warning, checksum
		// notes) never reach the user: errors come back and are explained
		// (Probe).
		config.WithLogger(logging.Nop{}),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("objstore: s3 config: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	cli := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Uploads carry CRC32 checksums (SDK default); downloads are not
		// checksum-validated unless asked, which also keeps the SDK from
		// logging that about every GET.
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	prefix := strings.TrimLeft(cfg.Prefix, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &S3{
		cli:      cli,
		bucket:   cfg.Bucket,
		prefix:   prefix,
		partSize: cfg.PartSize,
		attempts: cfg.MaxAttempts,
		backoff:  retry.NewExponentialJitterBackoff(cfg.MaxBackoff),
		retryer:  newRetryer(),
		endpoint: cfg.Endpoint,
		region:   awsCfg.Region,
	}, nil
}

// Bucket returns the bucket name.
func (s *S3) Bucket() string { return s.bucket }

// Prefix returns the key prefix, "" or ending in "/".
func (s *S3) Prefix() string { return s.prefix }

// Client returns the underlying SDK client (for tests and tools).
func (s *S3) Client() *s3.Client { return s.cli }

func (s *S3) fullKey(key string) string { return s.prefix + key }

func quoteETag(e string) string { return `"` + e + `"` }

func unquoteETag(p *string) string {
	if p == nil {
		return ""
	}
	return strings.Trim(*p, `"`)
}

// errCode returns the S3 error code and HTTP status in err, if any.
func errCode(err error) (code string, status int) {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

func isS3NotFound(err error) bool {
	code, status := errCode(err)
	switch code {
	case "NoSuchKey", "NotFound":
		return true
	case "NoSuchBucket", "NoSuchUpload":
		return false
	}
	return status == http.StatusNotFound
}

func isS3Precondition(err error) bool {
	code, status := errCode(err)
	return code == "PreconditionFailed" || code == "ConditionalRequestConflict" ||
		status == http.StatusPreconditionFailed ||
		(status == http.StatusConflict && code == "ConditionalRequestConflict")
}

// transient reports whether err, from a request made with ctx, is worth
// retrying. Only the caller giving up (ctx done) makes a context error
// final: the transport's own timeouts, such as net/http's "timeout
// awaiting response headers", also match context.DeadlineExceeded, and a
// store that took a request and never answered is an outage, not a
// refusal.
func (s *S3) transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return s.retryer.IsErrorRetryable(err)
}

// mapErr turns an SDK error into one wrapping the objstore sentinels.
func (s *S3) mapErr(ctx context.Context, op, key string, err error) error {
	switch {
	case isS3NotFound(err):
		return fmt.Errorf("%s %s: %w", op, key, ErrNotFound)
	case isS3Precondition(err):
		return fmt.Errorf("%s %s: %w", op, key, ErrPreconditionFailed)
	}
	if code, _ := errCode(err); code == "NoSuchBucket" {
		return fmt.Errorf("%s %s: bucket %q does not exist: %w", op, key, s.bucket, err)
	}
	if s.transient(ctx, err) {
		return fmt.Errorf("%s %s: %w: %w", op, key, ErrUnavailable, err)
	}
	return fmt.Errorf("%s %s: %w", op, key, err)
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) ([]byte, error) {
	out, err := s.cli.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.fullKey(key)),
	})
	if err != nil {
		return nil, s.mapErr(ctx, "get", key, err)
	}
	defer out.Body.Close()
	return readBody(ctx, out.Body, aws.ToInt64(out.ContentLength), "get", key, s)
}

func readBody(ctx context.Context, r io.Reader, size int64, op, key string, s *S3) ([]byte, error) {
	if size <= 0 {
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(r); err != nil {
			return nil, s.mapErr(ctx, op, key, err)
		}
		return buf.Bytes(), nil
	}
	// Into a buffer of the announced size: a bytes.Buffer of that
	// capacity grew (a new buffer and a copy of all of it) at the end
	// just to see EOF, which cost a cold read from the store a copy of
	// every byte.
	// (The HTTP client ends a body at its Content-Length.)
	b := make([]byte, size)
	n, err := readFull(r, b)
	if err != nil {
		return nil, s.mapErr(ctx, op, key, err)
	}
	return b[:n], nil // short: the caller reports it
}

// readFull reads r into b until b is full or r ends, and returns how many
// bytes it read; an early end is not an error.
func readFull(r io.Reader, b []byte) (int, error) {
	n, err := io.ReadFull(r, b)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

var _ RangeReader = (*S3)(nil)

// ReadRange implements RangeReader: the body of a ranged GET is read
// straight into dst, with no buffer of its own and no copy.
func (s *S3) ReadRange(ctx context.Context, key string, off int64, dst []byte) error {
	length := int64(len(dst))
	if length == 0 {
		_, err := s.GetRange(ctx, key, off, 0)
		return err
	}
	body, _, err := s.getRange(ctx, key, off, length)
	if err != nil {
		return err
	}
	defer body.Close()
	return s.readBodyTo(ctx, key, off, body, dst)
}

// readBodyTo reads the body of the ranged GET of [off, off+len(dst)) of
// key into dst, and checks that it held exactly those bytes.
func (s *S3) readBodyTo(ctx context.Context, key string, off int64, body io.Reader, dst []byte) error {
	n, err := readFull(body, dst)
	if err != nil {
		return s.mapErr(ctx, "get", key, err)
	}
	if n < len(dst) {
		return fmt.Errorf("get %s: range [%d,+%d) outside object (got %d bytes)", key, off, len(dst), n)
	}
	// A server that ignored the range sends the whole object.
	var one [1]byte
	if k, _ := body.Read(one[:]); k > 0 {
		return fmt.Errorf("get %s: range [%d,+%d) returned more bytes", key, off, len(dst))
	}
	return nil
}

// GetRange implements Store with a "bytes=a-b" ranged GET.
func (s *S3) GetRange(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if off < 0 || length < 0 || off > math.MaxInt64-length {
		return nil, fmt.Errorf("get %s: invalid range [%d,+%d)", key, off, length)
	}
	if length == 0 {
		// HTTP cannot express an empty range; check the bounds with Head.
		info, err := s.Head(ctx, key)
		if err != nil {
			return nil, err
		}
		if off > info.Size {
			return nil, fmt.Errorf("get %s: range [%d,+0) outside object of %d bytes", key, off, info.Size)
		}
		return []byte{}, nil
	}
	body, size, err := s.getRange(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	// A range past the end of the object is refused on the response's
	// length, before room is made for it: a length far beyond the object
	// must not cost its allocation.
	if size >= 0 && size < length {
		return nil, fmt.Errorf("get %s: range [%d,+%d) outside object (%d bytes from %d)", key, off, length, size, off)
	}
	b := make([]byte, length)
	if err := s.readBodyTo(ctx, key, off, body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// getRange sends the ranged GET of length > 0 bytes at off of key and
// returns the response's body and its announced length (-1: none).
func (s *S3) getRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, int64, error) {
	if off < 0 || length <= 0 || off > math.MaxInt64-length {
		return nil, 0, fmt.Errorf("get %s: invalid range [%d,+%d)", key, off, length)
	}
	out, err := s.cli.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.fullKey(key)),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+length-1)),
	})
	if err != nil {
		if code, status := errCode(err); code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable {
			return nil, 0, fmt.Errorf("get %s: range [%d,+%d) outside object: %w", key, off, length, err)
		}
		return nil, 0, s.mapErr(ctx, "get", key, err)
	}
	size := int64(-1)
	if out.ContentLength != nil {
		size = *out.ContentLength
	}
	return out.Body, size, nil
}

// Head implements Store.
func (s *S3) Head(ctx context.Context, key string) (ObjectInfo, error) {
	out, err := s.cli.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.fullKey(key)),
	})
	if err != nil {
		return ObjectInfo{}, s.mapErr(ctx, "head", key, err)
	}
	return ObjectInfo{
		Key:     key,
		Size:    aws.ToInt64(out.ContentLength),
		ETag:    unquoteETag(out.ETag),
		ModTime: aws.ToTime(out.LastModified),
	}, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	_, err := s.cli.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.fullKey(key)),
	})
	if err != nil && !isS3NotFound(err) {
		return s.mapErr(ctx, "delete", key, err)
	}
	return nil
}

// DeleteMany implements Store with DeleteObjects, 1000 keys a request.
func (s *S3) DeleteMany(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		batch := keys[:min(len(keys), s3DeleteBatch)]
		keys = keys[len(batch):]
		ids := make([]types.ObjectIdentifier, len(batch))
		for i, k := range batch {
			ids[i] = types.ObjectIdentifier{Key: aws.String(s.fullKey(k))}
		}
		out, err := s.cli.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(s.bucket),
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return s.mapErr(ctx, "delete many", batch[0], err)
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue
			}
			return fmt.Errorf("delete %s: %s: %s", strings.TrimPrefix(aws.ToString(e.Key), s.prefix),
				aws.ToString(e.Code), aws.ToString(e.Message))
		}
	}
	return nil
}

// List implements Store with ListObjectsV2. A limit above 1000 returns at
// most 1000 objects a page.
func (s *S3) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if limit <= 0 || limit > s3ListMax {
		limit = s3ListMax
	}
	in := &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.bucket),
		Prefix:  aws.String(s.fullKey(prefix)),
		MaxKeys: aws.Int32(int32(limit)),
	}
	if startAfter != "" {
		in.StartAfter = aws.String(s.fullKey(startAfter))
	}
	out, err := s.cli.ListObjectsV2(ctx, in)
	if err != nil {
		return ListPage{}, s.mapErr(ctx, "list", prefix, err)
	}
	p := ListPage{More: aws.ToBool(out.IsTruncated)}
	for _, o := range out.Contents {
		k := aws.ToString(o.Key)
		if !strings.HasPrefix(k, s.prefix) {
			continue
		}
		p.Objects = append(p.Objects, ObjectInfo{
			Key:     strings.TrimPrefix(k, s.prefix),
			Size:    aws.ToInt64(o.Size),
			ETag:    unquoteETag(o.ETag),
			ModTime: aws.ToTime(o.LastModified),
		})
	}
	return p, nil
}
