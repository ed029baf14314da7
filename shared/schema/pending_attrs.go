package schema

// ScoreEvents and Activity attributes the stream decoders require.
const (
	AttrBoard     = "board"
	AttrScore     = "score"
	AttrEventType = "event_type"
	AttrSource    = "source"
	AttrDate      = "date"
	AttrPoints    = "points"
)

// Tables lists every table Rally owns.
func Tables() []Table { return append([]Table(nil), All...) }
