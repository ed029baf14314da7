package dynamo

// ScoreItem is a Scores item as the store writes it (benchmark seeds).
var ScoreItem = itemOf
