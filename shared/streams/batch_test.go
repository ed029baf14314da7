package streams

import (
	"errors"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// change is a toy domain record: a key at a version, maybe deleted.
type change struct {
	key     string
	version int64
	deleted bool
	note    string
}

func decodeToy(rec events.DynamoDBEventRecord) (change, bool, error) {
	img := rec.Change.NewImage
	deleted := false
	if img == nil {
		img, deleted = rec.Change.OldImage, true
	}
	if img == nil {
		return change{}, false, nil
	}
	v, err := strconv.ParseInt(img["v"].Number(), 10, 64)
	if err != nil {
		return change{}, false, errors.New("not a toy")
	}
	if deleted {
		v++ // the rule for deletions
	}
	return change{key: img["k"].String(), version: v, deleted: deleted}, true, nil
}

func toy(seq, key string, version string, deleted bool) events.DynamoDBEventRecord {
	img := map[string]events.DynamoDBAttributeValue{"k": events.NewStringAttribute(key), "v": events.NewNumberAttribute(version)}
	r := events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{SequenceNumber: seq, NewImage: img}}
	if deleted {
		r.Change.NewImage, r.Change.OldImage = nil, img
	}
	return r
}

// A batch decodes up to its first unreadable record, which the partial
// failure names; records that carry nothing are skipped, not failed.
func TestDecodeStopsAtTheFirstUnreadableRecord(t *testing.T) {
	records := []events.DynamoDBEventRecord{
		toy("1", "a", "1", false),
		{Change: events.DynamoDBStreamRecord{SequenceNumber: "2"}}, // carries nothing
		toy("3", "b", "4", false),
		toy("4", "c", "x", false), // unreadable
		toy("5", "d", "1", false),
	}
	d := Decode(records, decodeToy)
	if len(d.Records) != 2 || d.Records[0].key != "a" || d.Records[1].key != "b" {
		t.Fatalf("decoded %+v, want a and b", d.Records)
	}
	var pe *PartialError
	if err := d.Err(); !errors.As(err, &pe) || pe.From != 3 {
		t.Fatalf("err %v, want a partial failure from record 3", err)
	}
	if err := Decode(records[:3], decodeToy).Err(); err != nil {
		t.Fatalf("a readable batch failed: %v", err)
	}
}

// The newest record of each key wins whatever the order, a deletion beats
// the record it deleted, and keys keep the order they first appeared in.
func TestNewestKeepsTheLatestStateOfEachKey(t *testing.T) {
	records := Decode([]events.DynamoDBEventRecord{
		toy("1", "a", "2", false),
		toy("2", "b", "5", false),
		toy("3", "a", "1", false), // older, late
		toy("4", "b", "5", true),  // b deleted at version 5
		toy("5", "c", "1", false),
		toy("6", "b", "5", false), // a redelivery of what was deleted
	}, decodeToy).Records
	merged := 0
	got := Newest(records, func(c change) string { return c.key }, func(c change) int64 { return c.version },
		func(older, newer change) change {
			merged++
			newer.note = "after " + strconv.FormatInt(older.version, 10)
			return newer
		})
	want := []change{{key: "a", version: 2}, {key: "b", version: 6, deleted: true, note: "after 5"}, {key: "c", version: 1}}
	if len(got) != len(want) {
		t.Fatalf("newest %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("newest %+v, want %+v", got, want)
		}
	}
	if merged != 1 {
		t.Fatalf("merge called %d times, want once (b's deletion replacing b)", merged)
	}
}
