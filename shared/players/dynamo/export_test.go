package dynamo

import "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

// ListedItem is the reverse entry saying that by lists friend, for tests
// that seed many lists at once.
func ListedItem(friend, by string) map[string]types.AttributeValue { return listedItem(friend, by) }
