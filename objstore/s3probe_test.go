package objstore

import (
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/smithy-go"
)

// TestS3ExplainSaysWhatToDo: each kind of refusal becomes one line that
// names what to change, and only network trouble is worth waiting for.
func TestS3ExplainSaysWhatToDo(t *testing.T) {
	ctx := context.Background()
	s, err := NewS3(ctx, S3Config{Bucket: "bkt", Prefix: "fs", Endpoint: "http://127.0.0.1:9", Region: "eu-west-3",
		PathStyle: true, AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	api := func(code string) error {
		return fmt.Errorf("operation error S3: ListObjectsV2: %w", &smithy.GenericAPIError{Code: code, Message: "the server's words"})
	}
	cases := []struct {
		err       error
		transient bool
		want      string
	}{
		{api("NoSuchBucket"), false, `bucket "bkt" does not exist at http://127.0.0.1:9`},
		{api("AccessDenied"), false, "access denied to s3://bkt/fs/ at http://127.0.0.1:9: the credentials (access key id AKIDEXAMPLE) need s3:ListBucket"},
		{api("InvalidAccessKeyId"), false, "does not know the access key id AKIDEXAMPLE"},
		{api("SignatureDoesNotMatch"), false, "rejects the secret key of access key id AKIDEXAMPLE"},
		{api("AuthorizationHeaderMalformed"), false, `bucket "bkt" is not in region "eu-west-3" (the server says: the server's words): set storage.region`},
		{api("RequestTimeTooSkewed"), false, "clock"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true, "connection refused"},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, "no usable answer: unexpected EOF"},
	}
	for _, tc := range cases {
		pe := s.explain(ctx, tc.err)
		if pe.Transient != tc.transient || !strings.Contains(pe.Msg, tc.want) || strings.Contains(pe.Msg, "operation error") {
			t.Errorf("explain(%v) = %q (transient %v), want %q (transient %v)", tc.err, pe.Msg, pe.Transient, tc.want, tc.transient)
		}
	}
}
