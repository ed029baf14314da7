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
		return numberSize(t.Value)
	case *types.AttributeValueMemberB:
		return len(t.Value)
	case *types.AttributeValueMemberL:
		return 3 + sum(t.Value, func(e types.AttributeValue) int { return 1 + valueSize(e) })
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range t.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		return sum(t.Value, func(e string) int { return len(e) })
	case *types.AttributeValueMemberNS:
		return sum(t.Value, numberSize)
	case *types.AttributeValueMemberBS:
		return sum(t.Value, func(e []byte) int { return len(e) })
	}
	return 1
}

// numberSize is a number's size: about one byte per two digits, plus two.
func numberSize(n string) int { return len(n)/2 + 2 }

func sum[E any](es []E, size func(E) int) int {
	n := 0
	for _, e := range es {
		n += size(e)
	}
	return n
}
