package objstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

var _ Prober = (*S3)(nil)

// Where implements Prober: the endpoint, or AWS's for the region.
func (s *S3) Where() string {
	if s.endpoint != "" {
		return s.endpoint
	}
	return fmt.Sprintf("AWS S3 (region %s)", s.region)
}

// Probe implements Prober: it resolves the credentials, then lists at most
// one key under the prefix, once (no SDK retries), and explains a failure.
func (s *S3) Probe(ctx context.Context) error {
	if creds := s.cli.Options().Credentials; creds != nil {
		if _, err := creds.Retrieve(ctx); err != nil {
			if ctx.Err() != nil {
				return &ProbeError{Transient: true, Msg: "no answer", Err: err}
			}
			return &ProbeError{Msg: "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE naming a profile in ~/.aws/credentials (on EC2, an instance role)", Err: err}
		}
	}
	_, err := s.cli.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.bucket),
		Prefix:  aws.String(s.prefix),
		MaxKeys: aws.Int32(1),
	}, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	if err == nil {
		return nil
	}
	return s.explain(ctx, err)
}

// explain turns a failed request into what to do about it.
func (s *S3) explain(ctx context.Context, err error) *ProbeError {
	where := s.Where()
	code, status := errCode(err)
	var dnsErr *net.DNSError
	switch {
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return &ProbeError{Transient: true, Msg: "no answer", Err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &ProbeError{Transient: true, Msg: "connection refused (nothing listens there: check storage.endpoint and that the S3 server runs)", Err: err}
	case errors.As(err, &dnsErr):
		return &ProbeError{Transient: true, Msg: fmt.Sprintf("cannot resolve %s (check storage.endpoint and DNS)", dnsErr.Name), Err: err}
	case code == "NoSuchBucket":
		return &ProbeError{Msg: fmt.Sprintf("bucket %q does not exist at %s: create it, or fix the bucket in storage.url", s.bucket, where), Err: err}
	case code == "AuthorizationHeaderMalformed" || code == "PermanentRedirect" || code == "IllegalLocationConstraintException" ||
		status == http.StatusMovedPermanently:
		return &ProbeError{Msg: s.wrongRegion(err), Err: err}
	case code == "InvalidAccessKeyId":
		return &ProbeError{Msg: fmt.Sprintf("%s does not know the access key id %s: check AWS_ACCESS_KEY_ID or the profile's credentials", where, s.keyID(ctx)), Err: err}
	case code == "SignatureDoesNotMatch":
		return &ProbeError{Msg: fmt.Sprintf("%s rejects the secret key of access key id %s: check AWS_SECRET_ACCESS_KEY or the profile's credentials", where, s.keyID(ctx)), Err: err}
	case code == "AccessDenied" || code == "AllAccessDisabled" || status == http.StatusForbidden:
		return &ProbeError{Msg: fmt.Sprintf("access denied to s3://%s/%s at %s: the credentials (access key id %s) need s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject there", s.bucket, s.prefix, where, s.keyID(ctx)), Err: err}
	case code == "RequestTimeTooSkewed":
		return &ProbeError{Msg: fmt.Sprintf("%s refuses requests from this machine's clock (RequestTimeTooSkewed): set the clock right (NTP)", where), Err: err}
	case status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || code == "SlowDown":
		return &ProbeError{Transient: true, Msg: fmt.Sprintf("the store answers HTTP %d %s", status, code), Err: err}
	case status != 0:
		return &ProbeError{Msg: fmt.Sprintf("%s answered HTTP %d %s to a listing of s3://%s/%s: %s", where, status, code, s.bucket, s.prefix, apiMessage(err)), Err: err}
	}
	// No answer from the server at all (a reset, a lost response): the
	// network, which waiting may mend.
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return &ProbeError{Transient: true, Msg: fmt.Sprintf("cannot connect: %v", opErr.Err), Err: err}
	}
	return &ProbeError{Transient: true, Msg: fmt.Sprintf("no usable answer: %v", rootCause(err)), Err: err}
}

func (s *S3) wrongRegion(err error) string {
	msg := fmt.Sprintf("bucket %q is not in region %q", s.bucket, s.region)
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		if r := re.Response.Header.Get("x-amz-bucket-region"); r != "" {
			return fmt.Sprintf("%s but in %q: set storage.region = %q", msg, r, r)
		}
	}
	if m := apiMessage(err); m != "" {
		return fmt.Sprintf("%s (the server says: %s): set storage.region", msg, m)
	}
	return msg + ": set storage.region to the bucket's region"
}

func apiMessage(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorMessage()
	}
	return ""
}

// keyID returns the access key id in use, for messages.
func (s *S3) keyID(ctx context.Context) string {
	if creds := s.cli.Options().Credentials; creds != nil {
		if v, err := creds.Retrieve(ctx); err == nil && v.AccessKeyID != "" {
			return v.AccessKeyID
		}
	}
	return "(unknown)"
}

// rootCause is the innermost error err wraps (the SDK's own wording of
// the outer layers is left out of messages).
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
