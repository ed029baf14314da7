// Package objects stores export documents (shared/exports.Documents): in
// an S3 bucket in AWS (Bucket), in a directory locally (Dir), whose links
// the local gateway serves as S3 serves presigned ones.
package objects

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
)

// LocalLinkKey signs the local stack's links to documents. It is local
// only: in AWS, links are S3's presigned ones.
const LocalLinkKey = "rally-local-export-links"

// LinkPath is the path the local gateway serves documents under: the
// object key follows it.
const LinkPath = "/_local/"

// Dir keeps documents as files: the object at key is Root/key. Its links
// are Base + LinkPath + key with an expiry and a signature, which Serve
// checks (Base is the local stack's URL; empty gives a path).
type Dir struct {
	Root  string
	Base  string
	Key   []byte
	Clock clock.Clock
}

func (d *Dir) file(key string) (string, error) {
	clean := path.Clean("/" + key)[1:]
	if clean != key || key == "" || strings.HasPrefix(key, "/") {
		return "", fmt.Errorf("objects: %q is not an object key", key)
	}
	return filepath.Join(d.Root, filepath.FromSlash(key)), nil
}

// write writes name whole or not at all: into a file beside it, renamed.
func write(name string, fill func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := fill(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}

// Put implements exports.Documents.
func (d *Dir) Put(_ context.Context, key string, data []byte) error {
	name, err := d.file(key)
	if err != nil {
		return err
	}
	return write(name, func(w io.Writer) error { _, err := w.Write(data); return err })
}

// Get reads the object at key whole.
func (d *Dir) Get(_ context.Context, key string) ([]byte, error) {
	name, err := d.file(key)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("objects: get %s: %w", key, err)
	}
	return data, nil
}

// Join implements exports.Documents.
func (d *Dir) Join(_ context.Context, key string, parts []string) error {
	name, err := d.file(key)
	if err != nil {
		return err
	}
	return write(name, func(w io.Writer) error {
		for _, p := range parts {
			src, err := d.file(p)
			if err != nil {
				return err
			}
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Delete implements exports.Documents.
func (d *Dir) Delete(_ context.Context, keys ...string) error {
	for _, k := range keys {
		name, err := d.file(k)
		if err != nil {
			return err
		}
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// DeletePrefix implements exports.Documents: every file whose key starts
// with prefix, and the folders it leaves empty.
func (d *Dir) DeletePrefix(_ context.Context, prefix string) error {
	base := prefix[:strings.LastIndexByte(prefix, '/')+1]
	dir := filepath.Join(d.Root, filepath.FromSlash(base))
	err := filepath.WalkDir(dir, func(name string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(d.Root, name)
		if err != nil {
			return err
		}
		if strings.HasPrefix(filepath.ToSlash(rel), prefix) {
			return os.Remove(name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	removeEmptyDirs(dir)
	return nil
}

// removeEmptyDirs removes the empty folders under dir, and dir if it ends
// empty.
func removeEmptyDirs(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	empty := true
	for _, e := range entries {
		if !e.IsDir() || !removeEmptyDirs(filepath.Join(dir, e.Name())) {
			empty = false
		}
	}
	if empty {
		return os.Remove(dir) == nil
	}
	return false
}

func (d *Dir) signature(key string, expires int64) string {
	m := hmac.New(sha256.New, d.Key)
	fmt.Fprintf(m, "%s\n%d", key, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// Link implements exports.Documents: a /_local/ URL of the key that Serve
// answers until until.
func (d *Dir) Link(_ context.Context, key string, until time.Time) (string, error) {
	if _, err := d.file(key); err != nil {
		return "", err
	}
	q := url.Values{}
	q.Set("expires", strconv.FormatInt(until.Unix(), 10))
	q.Set("signature", d.signature(key, until.Unix()))
	return d.Base + LinkPath + key + "?" + q.Encode(), nil
}

// ServeHTTP serves a link's document, as S3 serves a presigned GET: 403
// once it expired or for a signature that does not match, 404 for a
// document that is gone.
func (d *Dir) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := d.serve(w, r)
	if err == nil {
		return
	}
	resp := api.Encode(api.ProblemFor(err))
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.WriteString(w, resp.Body)
}

func (d *Dir) serve(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return errs.New(errs.NotFound, "an export link answers GET only")
	}
	key := strings.TrimPrefix(r.URL.Path, LinkPath)
	expires, err := strconv.ParseInt(r.URL.Query().Get("expires"), 10, 64)
	sig, _ := hex.DecodeString(r.URL.Query().Get("signature"))
	if err != nil || !hmac.Equal(sig, mustHex(d.signature(key, expires))) {
		return errs.New(errs.Forbidden, "the link's signature does not match")
	}
	if !clock.Now(d.Clock).Before(time.Unix(expires, 0)) {
		return errs.New(errs.Forbidden, "the link expired at %s; ask for the export's status again for a new one",
			time.Unix(expires, 0).UTC().Format(time.RFC3339))
	}
	name, err := d.file(key)
	if err != nil {
		return errs.New(errs.NotFound, "no such document")
	}
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return errs.New(errs.NotFound, "the document is gone (expired or erased)")
	}
	if err != nil {
		return err
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="`+path.Base(key)+`"`)
	w.Header().Set("Cache-Control", "private, no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, err = io.Copy(w, f)
	}
	return err
}

func mustHex(s string) []byte {
	b, _ := hex.DecodeString(s)
	return b
}
