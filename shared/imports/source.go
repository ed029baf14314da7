package imports

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/jobs"
)

// Sources opens import files from an offset.
type Sources interface {
	// Open reads source from byte offset on; size is the whole file's.
	Open(ctx context.Context, source string, offset int64) (r io.ReadCloser, size int64, err error)
}

// ObjectGetter is what an import reads of S3.
type ObjectGetter interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

// Opener opens s3:// sources with S3 and, when Files is set (the local
// stack only: a function in AWS has no file of the operator's to read),
// file:// sources from the local disk.
type Opener struct {
	S3    ObjectGetter
	Files bool
}

// Open implements Sources. A source that does not exist is NotFound and
// one not allowed here Invalid: the job fails at once, without retries.
func (o Opener) Open(ctx context.Context, source string, offset int64) (io.ReadCloser, int64, error) {
	switch {
	case strings.HasPrefix(source, jobs.SchemeFile):
		if !o.Files {
			return nil, 0, errs.New(errs.Invalid, "file:// sources are read on the local stack only; upload %s to S3", source)
		}
		return openFile(strings.TrimPrefix(source, jobs.SchemeFile), offset)
	case strings.HasPrefix(source, jobs.SchemeS3) && o.S3 != nil:
		bucket, key, _ := strings.Cut(strings.TrimPrefix(source, jobs.SchemeS3), "/")
		return o.openObject(ctx, bucket, key, offset)
	}
	return nil, 0, errs.New(errs.Invalid, "cannot read %s here", source)
}

func openFile(path string, offset int64) (io.ReadCloser, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, errs.New(errs.NotFound, "no file %s", path)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", path, err)
	}
	info, err := f.Stat()
	if err == nil {
		_, err = f.Seek(offset, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("open %s at %d: %w", path, offset, err)
	}
	return f, info.Size(), nil
}

// openObject streams an object from offset on (a Range request, so a
// resumed import reads no byte twice).
func (o Opener) openObject(ctx context.Context, bucket, key string, offset int64) (io.ReadCloser, int64, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if offset > 0 {
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", offset))
	}
	out, err := o.S3.GetObject(ctx, in)
	var api smithy.APIError
	switch {
	case errors.As(err, &api) && (api.ErrorCode() == "NoSuchKey" || api.ErrorCode() == "NoSuchBucket"):
		return nil, 0, errs.New(errs.NotFound, "no object s3://%s/%s", bucket, key)
	case errors.As(err, &api) && api.ErrorCode() == "InvalidRange":
		// The checkpoint is at the end of the object.
		return io.NopCloser(strings.NewReader("")), offset, nil
	case err != nil:
		return nil, 0, fmt.Errorf("read s3://%s/%s: %w", bucket, key, err)
	}
	size := aws.ToInt64(out.ContentLength) + offset
	if r := aws.ToString(out.ContentRange); r != "" {
		// "bytes 100-199/200": the whole object's size follows the slash.
		if _, total, ok := strings.Cut(r, "/"); ok {
			fmt.Sscan(total, &size)
		}
	}
	return out.Body, size, nil
}
