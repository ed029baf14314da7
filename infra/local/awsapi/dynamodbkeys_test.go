package awsapi

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestTopLevelNamesOfAnExpression(t *testing.T) {
	names := map[string]string{"#0": "scores", "#1": "weekly", "#n": "display_name"}
	for _, c := range []struct {
		expr string
		want []string
	}{
		{"", nil},
		{"#n", []string{"display_name"}},
		{"#0.#1[2].best, board", []string{"scores", "board"}},
		{"SET #n = :n, ver = ver + :one REMOVE tmp ADD total :t DELETE tags :x", []string{"display_name", "ver", "ver", "tmp", "total", "tags"}},
		{"attribute_not_exists(player_id) OR (#n <> :n AND size (bio) BETWEEN :a AND :b)", []string{"player_id", "display_name", "bio"}},
		{"board IN (:a, :b) and not begins_with(#0.#1, :p)", []string{"board", "scores"}},
		{"list_append(if_not_exists(items, :empty), :new)", []string{"items"}},
		{"a[10].b.c", []string{"a"}},
	} {
		if got := topLevelNames(c.expr, names); !slices.Equal(got, c.want) {
			t.Errorf("topLevelNames(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
}

func TestConditionKeysOfItemCalls(t *testing.T) {
	projected := conditionKeys("GetItem", itemRequest{Key: raw("id"), ProjectionExpression: "#s", ExpressionAttributeNames: map[string]string{"#s": "secret"}})
	if !slices.Equal(projected["dynamodb:Attributes"], []string{"id", "secret"}) || !slices.Equal(projected["dynamodb:Select"], []string{"SPECIFIC_ATTRIBUTES"}) {
		t.Errorf("a projected read: %v", projected)
	}
	whole := conditionKeys("GetItem", itemRequest{Key: raw("id")})
	if !slices.Equal(whole["dynamodb:Select"], []string{"ALL_ATTRIBUTES"}) {
		t.Errorf("a read of the whole item: %v", whole)
	}
	count := conditionKeys("Query", itemRequest{KeyConditionExpression: "board = :b", Select: "COUNT"})
	if !slices.Equal(count["dynamodb:Select"], []string{"COUNT"}) || !slices.Equal(count["dynamodb:Attributes"], []string{"board"}) {
		t.Errorf("a counting query: %v", count)
	}
	put := conditionKeys("PutItem", itemRequest{Item: raw("id", "board"), ConditionExpression: "attribute_not_exists(id)", ReturnValues: "ALL_OLD"})
	if _, ok := put["dynamodb:Select"]; ok || !slices.Equal(put["dynamodb:Attributes"], []string{"board", "id"}) || !slices.Equal(put["dynamodb:ReturnValues"], []string{"ALL_OLD"}) {
		t.Errorf("a put: %v", put)
	}
	if _, ok := conditionKeys("UpdateItem", itemRequest{Key: raw("id")})["dynamodb:ReturnValues"]; ok {
		t.Error("an update that sets no ReturnValues has the key")
	}
	batch := conditionKeys("BatchWriteItem", batchRequest("BatchWriteItem", []byte(`[{"PutRequest":{"Item":{"id":{"S":"a"},"x":{"S":"1"}}}},{"DeleteRequest":{"Key":{"id":{"S":"b"}}}}]`)))
	if !slices.Equal(batch["dynamodb:Attributes"], []string{"id", "x"}) {
		t.Errorf("a batch write: %v", batch)
	}
}

// raw is an item or key with the given attributes.
func raw(names ...string) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for _, n := range names {
		m[n] = json.RawMessage(`{"S":"x"}`)
	}
	return m
}
