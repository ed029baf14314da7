package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/rallyhq/rally/infra/local/awsapi"
	"github.com/rallyhq/rally/shared/analytics"
	"github.com/rallyhq/rally/shared/routes"
)

// The local AWS endpoint's resources: the secret holding the cursor key
// (RALLY_SECRET_ARN; SecretARN has the others) and the analytics delivery
// stream (RALLY_FIREHOSE_STREAM) a function binary is given.
var (
	CursorSecretARN = SecretARN(routes.CursorKey)
	AnalyticsStream = "rally-local-analytics"
)

// SecretARN is the local AWS endpoint's secret holding the key of sec
// (rally-local-cursor, rally-local-logkey, rally-local-erasurekey).
func SecretARN(sec routes.Secret) string {
	return awsapi.SecretARN("rally-local-" + strings.ToLower(sec.Name))
}

// errorsPrefix is where the delivery stream writes records it cannot
// convert (infra/stack ErrorsPrefix).
const errorsPrefix = "errors/"

// startAWS starts the local AWS endpoint in front of the stack's DynamoDB,
// keys, analytics export and processors.
func (s *Stack) startAWS() error {
	s.delivery = &deliveryStream{dir: s.deps.Config.AnalyticsDir}
	// Each secret holds the key the in-process handlers use.
	secrets := map[string]awsapi.Secret{}
	for _, sec := range routes.Secrets() {
		if current, _ := s.deps.Key(sec).Keys(); current != nil {
			secrets[SecretARN(sec)] = awsapi.Secret{Current: string(current)}
		}
	}
	srv, err := awsapi.New(awsapi.Options{
		DynamoDB: s.ddbURL,
		Admin:    aws.Credentials{AccessKeyID: s.opts.AccessKeyID, SecretAccessKey: s.opts.SecretAccessKey},
		Secrets:  secrets,
		Firehose: s.delivery,
		Invoke:   s.invoke,
		Log:      s.log,
		Written:  s.wake,
	})
	if err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	s.aws = srv
	return nil
}

// invoke runs the stream processor function with payload, a DynamoDB
// event, as Lambda Invoke does: its response, or its error as the
// function's.
func (s *Stack) invoke(ctx context.Context, function string, payload []byte) ([]byte, error) {
	p, err := s.poller(function)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", awsapi.ErrNotFound, function)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("the payload is not a DynamoDB event: %w", err)
	}
	resp, err := p.Invoke(ctx, ev.Records)
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

// deliveryStream is the analytics delivery stream: it splits each record
// into its events and writes them to the local export as the delivery
// stream writes them to S3; a record it cannot read goes under errors/,
// as format-conversion failures do in AWS.
// Besides AnalyticsStream it takes the names the template gives the
// delivery stream, for the binaries (Options.Binaries).
type deliveryStream struct {
	dir string

	mu    sync.Mutex
	names []string
}

// also makes the stream answer to name too.
func (d *deliveryStream) also(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names = append(d.names, name)
}

func (d *deliveryStream) known(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return name == AnalyticsStream || slices.Contains(d.names, name)
}

func (d *deliveryStream) PutRecords(ctx context.Context, stream string, records [][]byte) ([]bool, error) {
	if !d.known(stream) {
		return nil, fmt.Errorf("%w: the local delivery stream is %s", awsapi.ErrNotFound, AnalyticsStream)
	}
	if d.dir == "" {
		return nil, errors.New("the local stack writes no analytics export")
	}
	var (
		evs   []analytics.Event
		owner []int // the record each event came in
	)
	failed := make([]bool, len(records))
	for i, r := range records {
		got, err := analytics.EventsOfRecord(r)
		if err != nil {
			if err := d.unconverted(r, err); err != nil {
				failed[i] = true
			}
			continue
		}
		for range got {
			owner = append(owner, i)
		}
		evs = append(evs, got...)
	}
	if len(evs) == 0 {
		return failed, nil
	}
	sent, err := (&analytics.LocalSink{Dir: d.dir}).Send(ctx, evs)
	if err != nil && sent == nil {
		return nil, err
	}
	for j, f := range sent {
		if f {
			failed[owner[j]] = true
		}
	}
	return failed, nil
}

// unconverted keeps a record the delivery stream could not convert, with
// the reason, under errors/format-conversion-failed/dt=DAY/.
func (d *deliveryStream) unconverted(record []byte, reason error) error {
	now := time.Now().UTC()
	dir := filepath.Join(d.dir, errorsPrefix+"format-conversion-failed", "dt="+now.Format("2006-01-02"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	line, err := json.Marshal(map[string]any{"rawData": record, "errorCode": "DataFormatConversion.MalformedData", "errorMessage": reason.Error()})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d-%s.json", now.UnixNano(), hex.EncodeToString(suffix))), append(line, '\n'), 0o644)
}
