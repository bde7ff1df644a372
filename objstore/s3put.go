package objstore

// Uploads to S3: one PutObject, or a multipart upload for objects larger
// than a part, each with its conditions and the checks a retried
// conditional write needs.

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"

	"ebbfs.dev/ebbfs/internal/worker"
)

// noSDKRetry makes one request a single attempt; S3's own loop retries it.
func noSDKRetry(o *s3.Options) { o.RetryMaxAttempts = 1 }

// unsignedPayloadMin is the body size from which uploads are sent with an
// unsigned payload.
const unsignedPayloadMin = 64 << 10

// unsignedPayload sends a request's body unsigned ("UNSIGNED-PAYLOAD" in
// the SigV4 signature) with its CRC32 checksum in a header: over plain
// HTTP the SDK otherwise hashes every uploaded byte with SHA-256 to sign
// it (a fifth of the writer's CPU). Over HTTPS the SDK already streams
// unsigned with a checksum trailer, and this changes nothing. What ebbfs
// uploads in bodies this large is sealed (frames, directories, metadata):
// the AEAD detects tampering on read, the CRC32 (checked by the server)
// corruption in transit; the signature still covers the headers, so the
// key, the conditions and the checksum cannot be altered.
func unsignedPayload(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Build.Add(middleware.BuildMiddlewareFunc("ebbfsUnsignedPayload",
			func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				return next.HandleBuild(v4.SetPayloadHash(ctx, "UNSIGNED-PAYLOAD"), in)
			}), middleware.After)
	})
}

// putConditions returns the If-None-Match and If-Match headers of opts
// (nil when unset) and the options of one attempt: a single try unless
// sdkRetry.
func putConditions(opts PutOptions, sdkRetry bool) (ifNoneMatch, ifMatch *string, optFns []func(*s3.Options)) {
	if opts.IfAbsent {
		ifNoneMatch = aws.String("*")
	}
	if opts.IfMatch != "" {
		ifMatch = aws.String(quoteETag(opts.IfMatch))
	}
	if !sdkRetry {
		optFns = append(optFns, noSDKRetry)
	}
	return ifNoneMatch, ifMatch, optFns
}

// Put implements Store. Objects larger than PartSize are uploaded in parts.
// It keeps nothing of data once it returns (Store): the SDK hands each
// attempt's body to net/http wrapped in a reader that it closes when the
// attempt returns, after which the reader gives no more bytes, so a
// transport goroutine still sending a failed attempt's body stops there;
// the parts of a multipart upload are all waited for.
//
// Conditional Puts send If-None-Match: * (IfAbsent) or If-Match (IfMatch),
// on PutObject or, for multipart, on CompleteMultipartUpload. A 412 or a
// 409 ConditionalRequestConflict is ErrPreconditionFailed; IfMatch on a
// missing object is ErrPreconditionFailed too.
//
// A retried conditional write can lose its own race: the first attempt
// lands but its response is lost, and the retry sees the new object and
// gets 412. So after an attempt with an unknown outcome, a 412 is followed
// by a Head; if the object's ETag is the one this write produces, the Put
// succeeded. (Another writer storing the very same bytes is
// indistinguishable; ebbfs's conditional payloads name their writer.)
func (s *S3) Put(ctx context.Context, key string, data []byte, opts PutOptions) (string, error) {
	if key == "" {
		return "", errors.New("put: empty key")
	}
	if opts.IfAbsent && opts.IfMatch != "" {
		return "", fmt.Errorf("put %s: IfAbsent and IfMatch are exclusive", key)
	}
	if int64(len(data)) > s.partSize {
		return s.putMultipart(ctx, key, data, opts)
	}
	conditional := opts.IfAbsent || opts.IfMatch != ""
	send := func(ctx context.Context, sdkRetry bool) (string, error) {
		in := &s3.PutObjectInput{
			Bucket:        aws.String(s.bucket),
			Key:           aws.String(s.fullKey(key)),
			Body:          bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))),
		}
		var optFns []func(*s3.Options)
		in.IfNoneMatch, in.IfMatch, optFns = putConditions(opts, sdkRetry)
		if len(data) >= unsignedPayloadMin {
			optFns = append(optFns, unsignedPayload)
		}
		out, err := s.cli.PutObject(ctx, in, optFns...)
		if err != nil {
			return "", err
		}
		return unquoteETag(out.ETag), nil
	}
	if !conditional {
		etag, err := send(ctx, true)
		if err != nil {
			return "", s.mapErr(ctx, "put", key, err)
		}
		return etag, nil
	}
	return s.conditionally(ctx, key, data, opts, func() string { return etagOf(data) }, send)
}

// conditionally runs a conditional write of data with S3's own retry loop
// (see Put). want returns the ETag the write produces on a store whose
// ETags are MD5s; it is called only to resolve a 412 after an attempt
// whose outcome is unknown (hashing every payload to predict an ETag that
// the response carries anyway cost a third of the writer's CPU).
func (s *S3) conditionally(ctx context.Context, key string, data []byte, opts PutOptions, want func() string,
	send func(ctx context.Context, sdkRetry bool) (string, error)) (string, error) {
	ambiguous := false // an earlier attempt may have landed
	var lastErr error
	for attempt := 1; ; attempt++ {
		etag, err := send(ctx, false)
		if err == nil {
			return etag, nil
		}
		lastErr = err
		lost := isS3Precondition(err) || (opts.IfMatch != "" && isS3NotFound(err))
		// A retried CompleteMultipartUpload whose first attempt landed
		// finds its upload gone.
		code, _ := errCode(err)
		if ambiguous && (lost || code == "NoSuchUpload") {
			if etag, ok := s.landed(ctx, key, data, want); ok {
				return etag, nil
			}
		}
		if lost {
			return "", fmt.Errorf("put %s: %w", key, ErrPreconditionFailed)
		}
		if !s.transient(ctx, err) || attempt >= s.attempts {
			break
		}
		ambiguous = true
		d, derr := s.backoff.BackoffDelay(attempt, err)
		if derr != nil {
			break
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("put %s: %w (after %v)", key, ctx.Err(), lastErr)
		case <-t.C:
		}
	}
	return "", s.mapErr(ctx, "put", key, lastErr)
}

// landedCompareMax bounds the objects whose content landed compares when
// their ETag is not the MD5 it predicts: metadata (journals, manifests,
// leases) is far smaller; a segment's upload checks its own tail instead
// (segment.Upload).
const landedCompareMax = 8 << 20

// landed reports whether the object at key is data, written by an earlier
// attempt of this Put whose response was lost, and returns its ETag. The
// ETag settles it where the store's ETags are MD5s (want); stores whose
// ETags are not (SSE-KMS on AWS, servers that derive them from checksums)
// have the object read back and compared, up to landedCompareMax bytes.
func (s *S3) landed(ctx context.Context, key string, data []byte, want func() string) (string, bool) {
	info, err := s.Head(ctx, key)
	if err != nil || info.Size != int64(len(data)) {
		return "", false
	}
	if info.ETag == want() {
		return info.ETag, true
	}
	if len(data) > landedCompareMax {
		return "", false
	}
	got, err := s.Get(ctx, key)
	if err != nil || !bytes.Equal(got, data) {
		return "", false
	}
	// The object read may be newer than the Head (another writer); its
	// bytes are this write's, so the ETag to go on from is the Head's only
	// if nothing changed in between.
	again, err := s.Head(ctx, key)
	if err != nil || again.ETag != info.ETag {
		return "", false
	}
	return info.ETag, true
}

// putMultipart uploads data in PartSize parts, s3PartWorkers at a time; a
// condition goes on CompleteMultipartUpload. A failed upload is aborted.
func (s *S3) putMultipart(ctx context.Context, key string, data []byte, opts PutOptions) (string, error) {
	full := s.fullKey(key)
	created, err := s.cli.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(full),
		// Like the SDK's upload manager: parts carry CRC32 checksums
		// and the completion lists them.
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
	})
	if err != nil {
		return "", s.mapErr(ctx, "put", key, err)
	}
	uploadID := created.UploadId
	completed := false
	defer func() {
		if completed {
			return
		}
		// Abort even if ctx is done, so no parts are left behind.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = s.cli.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(s.bucket), Key: aws.String(full), UploadId: uploadID,
		})
	}()

	n := int((int64(len(data)) + s.partSize - 1) / s.partSize)
	parts, err := s.uploadParts(ctx, full, uploadID, data, n)
	if err != nil {
		return "", s.mapErr(ctx, "put", key, err)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("put %s: %w", key, err)
	}

	// The multipart ETag, needed only after a lost response: md5 of the
	// parts' binary md5s, "-", part count.
	want := func() string {
		h := md5.New()
		for i := range n {
			sum := md5.Sum(data[int64(i)*s.partSize : min(int64(i+1)*s.partSize, int64(len(data)))])
			h.Write(sum[:])
		}
		return fmt.Sprintf("%s-%d", hex.EncodeToString(h.Sum(nil)), n)
	}

	send := func(ctx context.Context, sdkRetry bool) (string, error) {
		in := &s3.CompleteMultipartUploadInput{
			Bucket:          aws.String(s.bucket),
			Key:             aws.String(full),
			UploadId:        uploadID,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		}
		var optFns []func(*s3.Options)
		in.IfNoneMatch, in.IfMatch, optFns = putConditions(opts, sdkRetry)
		out, err := s.cli.CompleteMultipartUpload(ctx, in, optFns...)
		if err != nil {
			return "", err
		}
		return unquoteETag(out.ETag), nil
	}
	var etag string
	if opts.IfAbsent || opts.IfMatch != "" {
		etag, err = s.conditionally(ctx, key, data, opts, want, send)
	} else {
		etag, err = send(ctx, true)
		if err != nil {
			err = s.mapErr(ctx, "put", key, err)
		}
	}
	if err != nil {
		return "", err
	}
	completed = true
	return etag, nil
}

// uploadParts uploads data's n parts of a multipart upload, s3PartWorkers
// at a time, and returns them for the completion. The first failure stops
// the parts not yet started; every part started has returned when
// uploadParts does.
func (s *S3) uploadParts(ctx context.Context, full string, uploadID *string, data []byte, n int) ([]types.CompletedPart, error) {
	parts := make([]types.CompletedPart, n)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		senders worker.Group
		errOnce sync.Once
		partErr error
		next    = make(chan int)
	)
	for range min(s3PartWorkers, n) {
		senders.Go(func() {
			for i := range next {
				lo := int64(i) * s.partSize
				hi := min(lo+s.partSize, int64(len(data)))
				out, err := s.cli.UploadPart(pctx, &s3.UploadPartInput{
					Bucket:            aws.String(s.bucket),
					Key:               aws.String(full),
					UploadId:          uploadID,
					PartNumber:        aws.Int32(int32(i + 1)),
					Body:              bytes.NewReader(data[lo:hi]),
					ContentLength:     aws.Int64(hi - lo),
					ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
				}, unsignedPayload)
				if err != nil {
					errOnce.Do(func() { partErr = err; cancel() })
					continue
				}
				parts[i] = types.CompletedPart{
					ETag:          out.ETag,
					PartNumber:    aws.Int32(int32(i + 1)),
					ChecksumCRC32: out.ChecksumCRC32,
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-pctx.Done():
			break feed
		}
	}
	close(next)
	senders.Wait()
	return parts, partErr
}
