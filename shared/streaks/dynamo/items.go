package dynamo

import (
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streaks"
)

// streakItem is a Streaks item. breaks_at, live_pk, region_live_pk and
// live_sk (the schema's AttrBreaksAt, AttrLivePK, AttrRegionPK, AttrLiveSK)
// exist only while the streak is running, which keeps the indexes sparse.
// regions is the set of every region the streak was ever in: commits only
// add to it (see streakUpdate), and erasure reads it from the stream to
// take the player off every regional board they were on.
type streakItem struct {
	UserID      string   `dynamodbav:"user_id"`
	Current     int64    `dynamodbav:"current_streak"`
	Longest     int64    `dynamodbav:"longest_streak"`
	LastDate    string   `dynamodbav:"last_activity_date"`
	ReachedAt   *int64   `dynamodbav:"reached_at,omitempty"`
	Timezone    string   `dynamodbav:"timezone"`
	Region      string   `dynamodbav:"region,omitempty"`
	TotalPoints int64    `dynamodbav:"total_points"`
	Version     int64    `dynamodbav:"version"`
	TZChanges   []int64  `dynamodbav:"tz_changes"`
	TZRejected  int64    `dynamodbav:"tz_rejected"`
	UpdatedAt   string   `dynamodbav:"updated_at"`
	BreaksAt    *int64   `dynamodbav:"breaks_at,omitempty"`
	LivePK      string   `dynamodbav:"live_pk,omitempty"`
	RegionPK    string   `dynamodbav:"region_live_pk,omitempty"`
	LiveSK      string   `dynamodbav:"live_sk,omitempty"`
	Regions     []string `dynamodbav:"regions,stringset,omitempty"`
}

func streakItemOf(st streaks.State) streakItem {
	it := streakItem{
		UserID: st.UserID, Current: st.Current, Longest: st.Longest, LastDate: st.LastDate,
		ReachedAt: millis(st.ReachedAt), Timezone: st.Timezone, Region: st.Region, TotalPoints: st.TotalPoints,
		Version: st.Version, TZChanges: make([]int64, len(st.TZChanges)), TZRejected: st.TZRejected,
		UpdatedAt: ddb.FormatTime(st.UpdatedAt),
	}
	for i, t := range st.TZChanges {
		it.TZChanges[i] = t.UnixMilli()
	}
	// BreaksAt is zero unless there is a running streak with a valid date.
	if breaks := st.BreaksAt(); !breaks.IsZero() {
		it.BreaksAt = millis(breaks)
		shard := ShardOf(st.UserID)
		it.LivePK = LivePartition(st.LastDate, shard)
		if st.Region != "" {
			it.RegionPK = RegionPartition(st.Region, st.LastDate, shard)
		}
		it.LiveSK = LiveSortKey(st.Current, st.ReachedAt, st.UserID)
	}
	return it
}

func (it streakItem) state() streaks.State {
	st := streaks.State{
		UserID: it.UserID, Current: it.Current, Longest: it.Longest, LastDate: it.LastDate,
		ReachedAt: fromMillis(it.ReachedAt), Timezone: it.Timezone, Region: it.Region, TotalPoints: it.TotalPoints,
		Version: it.Version, TZRejected: it.TZRejected, UpdatedAt: ddb.ParseTime(it.UpdatedAt),
	}
	for _, ms := range it.TZChanges {
		st.TZChanges = append(st.TZChanges, time.UnixMilli(ms).UTC())
	}
	return st
}

func decodeState(item map[string]types.AttributeValue) (streaks.State, error) {
	var it streakItem
	if err := attributevalue.UnmarshalMap(item, &it); err != nil {
		return streaks.State{}, err
	}
	return it.state(), nil
}

// eventItem is an Activity evt# item: one recorded activity.
type eventItem struct {
	UserID           string `dynamodbav:"user_id"`
	SK               string `dynamodbav:"sk"`
	EventID          string `dynamodbav:"event_id"`
	EventType        string `dynamodbav:"event_type"`
	Source           string `dynamodbav:"source"`
	OccurredAt       string `dynamodbav:"occurred_at"`
	Date             string `dynamodbav:"date"`
	Points           int64  `dynamodbav:"points"`
	Timezone         string `dynamodbav:"timezone"`
	RejectedTimezone string `dynamodbav:"rejected_timezone,omitempty"`
	Streak           int64  `dynamodbav:"streak"`
	Region           string `dynamodbav:"region,omitempty"`
	ExpiresAt        int64  `dynamodbav:"expires_at"`
}

func eventItemOf(user string, e streaks.Event) eventItem {
	return eventItem{
		UserID: user, SK: EventSK(e), EventID: e.ID, EventType: string(e.Type), Source: string(e.Source),
		OccurredAt: ddb.FormatTime(e.OccurredAt), Date: e.Date, Points: e.Points, Timezone: e.Timezone,
		RejectedTimezone: e.RejectedTimezone, Streak: e.Streak, Region: e.Region,
		ExpiresAt: e.OccurredAt.Add(EventRetention).Unix(),
	}
}

// dayItem is an Activity day# item: a player's totals on one local date.
type dayItem struct {
	UserID    string           `dynamodbav:"user_id"`
	SK        string           `dynamodbav:"sk"`
	Date      string           `dynamodbav:"date"`
	Points    int64            `dynamodbav:"points"`
	Events    int64            `dynamodbav:"events"`
	ByType    map[string]int64 `dynamodbav:"by_type"`
	ExpiresAt int64            `dynamodbav:"expires_at"`
}

func dayItemOf(user string, d streaks.Day) (dayItem, error) {
	date, err := time.Parse(streaks.DateLayout, d.Date)
	if err != nil {
		return dayItem{}, fmt.Errorf("day %q: %w", d.Date, err)
	}
	it := dayItem{
		UserID: user, SK: DaySK(d.Date), Date: d.Date, Points: d.Points, Events: d.Events,
		ByType: make(map[string]int64, len(d.ByType)), ExpiresAt: date.Add(DayRetention).Unix(),
	}
	for t, p := range d.ByType {
		it.ByType[string(t)] = p
	}
	return it, nil
}

func (it dayItem) day() streaks.Day {
	d := streaks.Day{Date: it.Date, Points: it.Points, Events: it.Events, ByType: make(map[streaks.EventType]int64, len(it.ByType))}
	for t, p := range it.ByType {
		d.ByType[streaks.EventType(t)] = p
	}
	return d
}

// keyItem is an Activity idem# item: an idempotency record with the exact
// response bytes, written as binary (a string is read too).
type keyItem struct {
	UserID    string `dynamodbav:"user_id"`
	SK        string `dynamodbav:"sk"`
	Hash      string `dynamodbav:"hash"`
	CreatedAt string `dynamodbav:"created_at"`
	ExpiresAt int64  `dynamodbav:"expires_at"`
}

const responseAttr = "response"

func keyRecord(user string, c streaks.Commit, at time.Time) (map[string]types.AttributeValue, error) {
	item, err := attributevalue.MarshalMap(keyItem{
		UserID: user, SK: KeySK(c.Key), Hash: c.Hash, CreatedAt: ddb.FormatTime(at), ExpiresAt: at.Add(KeyRetention).Unix(),
	})
	if err != nil {
		return nil, err
	}
	item[responseAttr] = &types.AttributeValueMemberB{Value: append([]byte{}, c.Response...)}
	return item, nil
}

func decodeReplay(item map[string]types.AttributeValue) (streaks.Replay, error) {
	var it keyItem
	if err := attributevalue.UnmarshalMap(item, &it); err != nil {
		return streaks.Replay{}, err
	}
	r := streaks.Replay{Hash: it.Hash}
	switch v := item[responseAttr].(type) {
	case *types.AttributeValueMemberB:
		r.Response = v.Value
	case *types.AttributeValueMemberS:
		r.Response = []byte(v.Value)
	case nil, *types.AttributeValueMemberNULL:
	default:
		return streaks.Replay{}, fmt.Errorf("response is a %T, not bytes", v)
	}
	return r, nil
}

func userKey(user string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrUserID: ddb.S(user)}
}

func activityKey(user, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrUserID: ddb.S(user), schema.AttrSK: ddb.S(sk)}
}
