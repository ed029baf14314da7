package ddb

import "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

// ItemSize estimates an item's size the way DynamoDB counts it (attribute
// names plus values), erring on the large side.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return len(t.Value)
	case *types.AttributeValueMemberN:
		return len(t.Value)/2 + 2
	case *types.AttributeValueMemberB:
		return len(t.Value)
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range t.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range t.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range t.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, e := range t.Value {
			n += len(e)/2 + 2
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range t.Value {
			n += len(e)
		}
		return n
	}
	return 1
}
