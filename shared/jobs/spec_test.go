package jobs

import (
	"strings"
	"testing"

	"github.com/rallyhq/rally/shared/errs"
)

func TestAnImportNeedsASourceAndNothingElse(t *testing.T) {
	cases := []struct {
		spec  Spec
		field string // "" when valid
	}{
		{Spec{Kind: Import, Source: "s3://bucket/2026/scores.jsonl"}, ""},
		{Spec{Kind: Import, Source: "file:///tmp/scores.jsonl"}, ""},
		{Spec{Kind: Import}, "source"},
		{Spec{Kind: Import, Source: "s3://bucket"}, "source"},
		{Spec{Kind: Import, Source: "s3:///key"}, "source"},
		{Spec{Kind: Import, Source: "file://relative/path"}, "source"},
		{Spec{Kind: Import, Source: "file:///tmp/../etc/passwd"}, "source"},
		{Spec{Kind: Import, Source: "https://example.com/scores.jsonl"}, "source"},
		{Spec{Kind: Import, Source: "s3://bucket/key", Target: All}, "target"},
		{Spec{Kind: Import, Source: "s3://bucket/key", ID: "arena"}, "id"},
		{Spec{Kind: Rebuild, Target: All, Source: "s3://bucket/key"}, "source"},
		{Spec{Kind: "export", Target: All}, "kind"},
		{Spec{Kind: Recompute, Target: Friends}, ""},
		{Spec{Kind: Rebuild, Target: Friends}, "target"},
	}
	for _, tc := range cases {
		err := tc.spec.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.spec, err)
			}
			continue
		}
		var e *errs.Error
		if !errs.Is(err, errs.Invalid) || !asError(err, &e) || len(e.Fields) != 1 || e.Fields[0].Field != tc.field {
			t.Errorf("%+v: %v, want a field error on %s", tc.spec, err, tc.field)
		}
		if tc.field == "kind" && !strings.Contains(err.Error(), "import") {
			t.Errorf("the kind error does not name import: %v", err)
		}
	}
}

func asError(err error, target **errs.Error) bool {
	e, ok := err.(*errs.Error)
	*target = e
	return ok
}
