package objects_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/exports/objects"
)

// A local document is joined from its chunks, read through its link until
// the link expires by the given clock, and a link that was changed, or
// names a key outside the directory, reads nothing.
func TestLocalDocumentsAreJoinedLinkedAndExpire(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewSettable()
	clk.Stop()
	srv := httptest.NewServer(nil)
	defer srv.Close()
	d := &objects.Dir{Root: t.TempDir(), Base: srv.URL, Key: []byte("k"), Clock: clk}
	srv.Config.Handler = d
	for i, part := range []string{`{"a":[1,`, `2,3]`, `}`} {
		if err := d.Put(ctx, fmt.Sprintf("exports/u/x/chunk-%d", i), []byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Join(ctx, "exports/u/x/doc.json", []string{"exports/u/x/chunk-0", "exports/u/x/chunk-1", "exports/u/x/chunk-2"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, "exports/u/x/chunk-0", "exports/u/x/chunk-1", "exports/u/x/chunk-2", "exports/u/x/never"); err != nil {
		t.Fatal(err)
	}
	link, err := d.Link(ctx, "exports/u/x/doc.json", clk.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(link); code != 200 || body != `{"a":[1,2,3]}` {
		t.Fatalf("the link read %d %q", code, body)
	}
	for _, bad := range []string{
		strings.Replace(link, "doc.json", "chunk-0", 1),
		strings.Replace(link, "signature=", "signature=00", 1),
		strings.Replace(link, "expires=", "expires=1", 1),
	} {
		if code, _ := get(bad); code != 403 {
			t.Errorf("%s answered %d, want 403", bad, code)
		}
	}
	if _, err := d.Link(ctx, "exports/../../etc/passwd", clk.Now().Add(time.Hour)); err == nil {
		t.Error("a key climbing out of the directory was linked")
	}
	clk.Advance(time.Hour)
	if code, _ := get(link); code != 403 {
		t.Errorf("an expired link answered %d, want 403", code)
	}
	// Erased: the prefix goes, its folders too, the neighbour stays.
	if err := d.Put(ctx, "exports/v/y/doc.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := d.DeletePrefix(ctx, "exports/u/"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Root, "exports", "u")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the erased prefix is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.Root, "exports", "v", "y", "doc.json")); err != nil {
		t.Errorf("another prefix was erased: %v", err)
	}
}

// memS3 is an S3 bucket in memory: objects, multipart uploads (parts
// below 5 MiB refused but the last, as S3 does), listings by prefix.
type memS3 struct {
	mu      sync.Mutex
	objects map[string][]byte
	uploads map[string]map[int32][]byte
	parts   []int // sizes of the parts of completed uploads
}

func (m *memS3) PutObject(_ context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	b, _ := io.ReadAll(in.Body)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[*in.Key] = b
	return &s3.PutObjectOutput{}, nil
}

func (m *memS3) GetObject(_ context.Context, in *s3.GetObjectInput, _ ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[*in.Key]
	if !ok {
		return nil, &types.NoSuchKey{}
	}
	return &s3.GetObjectOutput{Body: io.NopCloser(bytes.NewReader(b))}, nil
}

func (m *memS3) DeleteObjects(_ context.Context, in *s3.DeleteObjectsInput, _ ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(in.Delete.Objects) > 1000 {
		return nil, errors.New("MalformedXML: more than 1000 keys")
	}
	for _, o := range in.Delete.Objects {
		delete(m.objects, *o.Key)
	}
	return &s3.DeleteObjectsOutput{}, nil
}

func (m *memS3) ListObjectsV2(_ context.Context, in *s3.ListObjectsV2Input, _ ...func(*s3.Options)) (*s3.ListObjectsV2Output, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objects {
		if strings.HasPrefix(k, aws.ToString(in.Prefix)) && k > aws.ToString(in.StartAfter)+aws.ToString(in.ContinuationToken) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := &s3.ListObjectsV2Output{}
	if len(keys) > 2 { // small pages, to be paged through
		keys, out.IsTruncated, out.NextContinuationToken = keys[:2], aws.Bool(true), aws.String(keys[1])
	}
	for _, k := range keys {
		out.Contents = append(out.Contents, types.Object{Key: aws.String(k)})
	}
	return out, nil
}

func (m *memS3) CreateMultipartUpload(_ context.Context, in *s3.CreateMultipartUploadInput, _ ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := fmt.Sprintf("up-%d", len(m.uploads))
	m.uploads[id] = map[int32][]byte{}
	return &s3.CreateMultipartUploadOutput{UploadId: aws.String(id)}, nil
}

func (m *memS3) UploadPart(_ context.Context, in *s3.UploadPartInput, _ ...func(*s3.Options)) (*s3.UploadPartOutput, error) {
	b, _ := io.ReadAll(in.Body)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.uploads[*in.UploadId][*in.PartNumber] = b
	return &s3.UploadPartOutput{ETag: aws.String(fmt.Sprint(*in.PartNumber))}, nil
}

func (m *memS3) CompleteMultipartUpload(_ context.Context, in *s3.CompleteMultipartUploadInput, _ ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var doc []byte
	parts := in.MultipartUpload.Parts
	for i, p := range parts {
		b := m.uploads[*in.UploadId][*p.PartNumber]
		if i < len(parts)-1 && len(b) < 5<<20 {
			return nil, errors.New("EntityTooSmall")
		}
		m.parts = append(m.parts, len(b))
		doc = append(doc, b...)
	}
	m.objects[*in.Key] = doc
	delete(m.uploads, *in.UploadId)
	return &s3.CompleteMultipartUploadOutput{}, nil
}

func (m *memS3) AbortMultipartUpload(_ context.Context, in *s3.AbortMultipartUploadInput, _ ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.uploads, *in.UploadId)
	return &s3.AbortMultipartUploadOutput{}, nil
}

// A document joined from many chunks in the bucket is their
// concatenation, uploaded in parts S3 accepts (5 MiB at least but the
// last) once it outgrows one; a small one is one object; erasing a prefix
// deletes every page of its listing.
func TestBucketJoinsChunksInPartsS3Accepts(t *testing.T) {
	ctx := context.Background()
	mem := &memS3{objects: map[string][]byte{}, uploads: map[string]map[int32][]byte{}}
	b := &objects.Bucket{Client: mem, Name: "docs", PartSize: 5 << 20}
	var want bytes.Buffer
	var chunks []string
	for i := range 24 { // 24 chunks of 700 KiB: about 16 MiB
		chunk := bytes.Repeat([]byte{byte('a' + i)}, 700<<10)
		key := fmt.Sprintf("exports/u/x/chunk-%02d", i)
		if err := b.Put(ctx, key, chunk); err != nil {
			t.Fatal(err)
		}
		want.Write(chunk)
		chunks = append(chunks, key)
	}
	if err := b.Join(ctx, "exports/u/x/doc.json", chunks); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem.objects["exports/u/x/doc.json"], want.Bytes()) {
		t.Fatalf("the joined document is %d bytes, not the %d of its chunks in order", len(mem.objects["exports/u/x/doc.json"]), want.Len())
	}
	if len(mem.parts) < 3 {
		t.Errorf("a %d MiB document was uploaded in parts of %v", want.Len()>>20, mem.parts)
	}
	if err := b.Join(ctx, "exports/u/y/doc.json", chunks[:1]); err != nil {
		t.Fatal(err)
	}
	if len(mem.objects["exports/u/y/doc.json"]) != 700<<10 || len(mem.uploads) != 0 {
		t.Errorf("a small document: %d bytes, %d uploads left open", len(mem.objects["exports/u/y/doc.json"]), len(mem.uploads))
	}
	mem.objects["exports/w/doc.json"] = []byte("{}")
	if err := b.DeletePrefix(ctx, "exports/u/"); err != nil {
		t.Fatal(err)
	}
	if len(mem.objects) != 1 || mem.objects["exports/w/doc.json"] == nil {
		t.Errorf("after erasing exports/u/: %d objects left", len(mem.objects))
	}
}
