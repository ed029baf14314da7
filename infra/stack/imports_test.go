package stack_test

import (
	"strings"
	"testing"

	"github.com/rallyhq/rally/shared/routes"
)

// prodImportBucket is the import bucket the prod fixture is deployed with.
const prodImportBucket = "rally-prod-imports"

// Only the functions that declare Imports (the job runner) may read the
// import bucket, and only its objects with s3:GetObject; a deployment
// given no bucket grants none.
func TestOnlyTheJobRunnerReadsTheImportBucket(t *testing.T) {
	for stage, s := range both() {
		readers := 0
		for _, fn := range s.declaredFunctions() {
			uses, _ := routes.UsesOf(fn.name)
			var granted []string
			for _, st := range statementsOf(s, fn.name) {
				for _, res := range resourceList(st.Resource) {
					r := mustJSON(res)
					if !strings.Contains(r, prodImportBucket) {
						continue
					}
					if !strings.Contains(r, ":s3:::"+prodImportBucket+`/*`) {
						t.Errorf("%s/%s: granted %v on %s, beyond the bucket's objects", stage, fn.name, strs(st.Action), r)
					}
					granted = append(granted, strs(st.Action)...)
				}
			}
			if len(granted) == 0 {
				continue
			}
			readers++
			if !uses.Imports || len(granted) != 1 || granted[0] != "s3:GetObject" {
				t.Errorf("%s/%s: granted %v on the import bucket (declares imports: %v)", stage, fn.name, granted, uses.Imports)
			}
		}
		want := map[string]int{"dev": 0, "prod": 1}[stage]
		if readers != want {
			t.Errorf("%s: %d functions read the import bucket, want %d (the job runner, where a bucket is given)", stage, readers, want)
		}
	}
}
