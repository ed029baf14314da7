package objects

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/rallyhq/rally/shared/clock"
)

// S3 is the part of the S3 client a Bucket calls.
type S3 interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, opts ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, opts ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	CreateMultipartUpload(ctx context.Context, in *s3.CreateMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error)
	UploadPart(ctx context.Context, in *s3.UploadPartInput, opts ...func(*s3.Options)) (*s3.UploadPartOutput, error)
	CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error)
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

// Bucket keeps documents in an S3 bucket (private, encrypted by default,
// its lifecycle expiring them). Links are presigned GETs: they carry the
// signing function's permission, so it needs s3:GetObject on the
// documents, and last until the link's expiry or the end of the signer's
// session credentials, whichever comes first (asking for the export again
// signs a new one).
type Bucket struct {
	Client S3
	// Presign signs links (s3.NewPresignClient of the same client).
	Presign *s3.PresignClient
	Name    string
	Clock   clock.Clock
	// PartSize is the size of a joined document's parts (default 8 MiB;
	// S3 takes no smaller part than 5 MiB but the last).
	PartSize int
}

const minPartSize = 5 << 20

// Put implements exports.Documents.
func (b *Bucket) Put(ctx context.Context, key string, data []byte) error {
	_, err := b.Client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(b.Name), Key: aws.String(key), Body: bytes.NewReader(data),
		ContentType: aws.String("application/json"),
	})
	if err != nil {
		return fmt.Errorf("objects: put %s: %w", key, err)
	}
	return nil
}

// Get reads the object at key whole.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, error) {
	var buf bytes.Buffer
	if err := b.read(ctx, key, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (b *Bucket) read(ctx context.Context, key string, into *bytes.Buffer) error {
	out, err := b.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.Name), Key: aws.String(key)})
	if err != nil {
		return fmt.Errorf("objects: get %s: %w", key, err)
	}
	defer out.Body.Close()
	if _, err := io.Copy(into, out.Body); err != nil {
		return fmt.Errorf("objects: read %s: %w", key, err)
	}
	return nil
}

// Join implements exports.Documents: the parts are read in order and
// written as one object, in a multipart upload of PartSize parts once
// they outgrow one (memory stays at a part, whatever the document's size).
func (b *Bucket) Join(ctx context.Context, key string, parts []string) (err error) {
	size := max(b.PartSize, minPartSize)
	if b.PartSize == 0 {
		size = 8 << 20
	}
	var buf bytes.Buffer
	var upload *string
	var done []types.CompletedPart
	defer func() {
		if err != nil && upload != nil {
			_, _ = b.Client.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{
				Bucket: aws.String(b.Name), Key: aws.String(key), UploadId: upload,
			})
		}
	}()
	send := func() error {
		if upload == nil {
			out, err := b.Client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
				Bucket: aws.String(b.Name), Key: aws.String(key), ContentType: aws.String("application/json"),
			})
			if err != nil {
				return fmt.Errorf("objects: start joining %s: %w", key, err)
			}
			upload = out.UploadId
		}
		n := int32(len(done) + 1)
		out, err := b.Client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(b.Name), Key: aws.String(key), UploadId: upload, PartNumber: aws.Int32(n),
			Body: bytes.NewReader(buf.Bytes()),
		})
		if err != nil {
			return fmt.Errorf("objects: join %s, part %d: %w", key, n, err)
		}
		done = append(done, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)})
		buf.Reset()
		return nil
	}
	for _, p := range parts {
		if err := b.read(ctx, p, &buf); err != nil {
			return err
		}
		if buf.Len() >= size {
			if err := send(); err != nil {
				return err
			}
		}
	}
	if upload == nil {
		return b.Put(ctx, key, buf.Bytes())
	}
	if buf.Len() > 0 {
		if err := send(); err != nil {
			return err
		}
	}
	_, err = b.Client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(b.Name), Key: aws.String(key), UploadId: upload,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done},
	})
	if err != nil {
		return fmt.Errorf("objects: finish joining %s: %w", key, err)
	}
	return nil
}

// Delete implements exports.Documents, a thousand keys a call.
func (b *Bucket) Delete(ctx context.Context, keys ...string) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		ids := make([]types.ObjectIdentifier, 0, n)
		for _, k := range keys[:n] {
			ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
		}
		out, err := b.Client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(b.Name), Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return fmt.Errorf("objects: delete %d objects: %w", n, err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("objects: delete %d objects: %d failed, the first %s: %s",
				n, len(out.Errors), aws.ToString(e.Key), aws.ToString(e.Message))
		}
		keys = keys[n:]
	}
	return nil
}

// DeletePrefix implements exports.Documents.
func (b *Bucket) DeletePrefix(ctx context.Context, prefix string) error {
	p := s3.NewListObjectsV2Paginator(b.Client, &s3.ListObjectsV2Input{Bucket: aws.String(b.Name), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("objects: list %s: %w", prefix, err)
		}
		keys := make([]string, 0, len(page.Contents))
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
		if err := b.Delete(ctx, keys...); err != nil {
			return err
		}
	}
	return nil
}

// Link implements exports.Documents: a presigned GET of the key, valid
// until until.
func (b *Bucket) Link(ctx context.Context, key string, until time.Time) (string, error) {
	ttl := until.Sub(clock.Now(b.Clock))
	if ttl <= 0 {
		return "", errors.New("objects: a link must end in the future")
	}
	req, err := b.Presign.PresignGetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(b.Name), Key: aws.String(key),
		ResponseContentDisposition: aws.String(`attachment; filename="rally-export.json"`),
		ResponseContentType:        aws.String("application/json"),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("objects: sign a link to %s: %w", key, err)
	}
	return req.URL, nil
}
