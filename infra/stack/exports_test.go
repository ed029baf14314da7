package stack_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/shared/exports"
	"github.com/rallyhq/rally/shared/routes"
)

// The exports bucket holds users' personal data for a few days: private,
// encrypted, reachable over TLS only, its access logged, every document
// expiring after exports.Retention (and an abandoned upload after a day).
func TestExportsBucketIsPrivateEncryptedTLSOnlyAndExpiring(t *testing.T) {
	for stage, s := range both() {
		bucket := logicalID(s.ref(s.stack.Exports.Bucket.BucketName()))
		props := s.resources[bucket].Properties
		if alg := path(props["BucketEncryption"], "ServerSideEncryptionConfiguration"); !strings.Contains(mustJSON(alg), `"SSEAlgorithm":"AES256"`) {
			t.Errorf("%s: bucket encryption %s", stage, mustJSON(alg))
		}
		block := map[string]any{"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true}
		if got := props["PublicAccessBlockConfiguration"]; mustJSON(got) != mustJSON(block) {
			t.Errorf("%s: public access block %s, want all four on", stage, mustJSON(got))
		}
		if dest := path(props, "LoggingConfiguration", "DestinationBucketName"); logicalID(dest) != logicalID(s.ref(s.stack.Analytics.AccessLogs.BucketName())) {
			t.Errorf("%s: server access logs go to %v, want the access-log bucket", stage, dest)
		}
		var expiry, abort any
		for _, r := range path(props, "LifecycleConfiguration", "Rules").([]any) {
			rule := r.(map[string]any)
			if rule["Prefix"] == exports.Prefix {
				expiry = rule["ExpirationInDays"]
			}
			if a, ok := rule["AbortIncompleteMultipartUpload"]; ok {
				abort = path(a, "DaysAfterInitiation")
			}
		}
		if want := exports.Retention.Hours() / 24; expiry != want {
			t.Errorf("%s: documents expire after %v days, want %v", stage, expiry, want)
		}
		if abort != 1.0 {
			t.Errorf("%s: incomplete uploads aborted after %v days, want 1", stage, abort)
		}
		check(t, stage+": TLS-only bucket policy", func() {
			s.template.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), like(
				"Bucket", s.ref(s.stack.Exports.Bucket.BucketName()),
				"PolicyDocument", like("Statement", assertions.Match_ArrayWith(&[]any{like(
					"Effect", "Deny", "Action", "s3:*",
					"Condition", map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
				)})),
			))
		})
	}
}

// Only the functions that declare export documents are told the bucket
// and reach it: each exactly its declared S3 actions, on the documents'
// prefix alone, and the archive's writer its own on the archive's; only
// an erasure lists the bucket.
func TestOnlyExportFunctionsReachTheExportsBucket(t *testing.T) {
	for stage, s := range both() {
		bucket := logicalID(s.ref(s.stack.Exports.Bucket.BucketName()))
		users := 0
		for _, fn := range s.declaredFunctions() {
			where := stage + "/" + fn.name
			uses, _ := routes.UsesOf(fn.name)
			_, told := environment(s, fn.name)["RALLY_EXPORT_BUCKET"]
			if told != (uses.Documents != 0) {
				t.Errorf("%s: told the exports bucket=%v, declares documents=%v", where, told, uses.Documents != 0)
			}
			var objects, archive, listing []string
			for _, st := range statementsOf(s, fn.name) {
				for _, res := range resourceList(st.Resource) {
					r := mustJSON(res)
					if !strings.Contains(r, `"`+bucket+`"`) {
						continue
					}
					for _, a := range strs(st.Action) {
						switch {
						case strings.Contains(r, `/`+exports.Prefix+`*"`):
							objects = append(objects, a)
						case strings.Contains(r, `/`+routes.ArchivePrefix+`*"`):
							archive = append(archive, a)
						case a == "s3:ListBucket":
							listing = append(listing, a)
						default:
							t.Errorf("%s: granted %s on %s, beyond the documents' prefix", where, a, r)
						}
					}
				}
			}
			if uses.Documents == 0 {
				if len(objects)+len(listing) > 0 {
					t.Errorf("%s: granted %v %v on the exports bucket, declares no documents", where, objects, listing)
				}
				continue
			}
			users++
			if !slices.Equal(archive, uses.Documents.Archive()) {
				t.Errorf("%s: granted %v on the archive, declared %v", where, archive, uses.Documents.Archive())
			}
			want, list := uses.Documents.S3()
			slices.Sort(objects)
			if !slices.Equal(objects, want) {
				t.Errorf("%s: granted %v on the documents, declared %v", where, objects, want)
			}
			if (len(listing) > 0) != list {
				t.Errorf("%s: may list the bucket=%v, declared %v", where, len(listing) > 0, list)
			}
		}
		if users != 4 {
			t.Errorf("%s: %d functions reach the exports bucket, want export-status, export-processor, erasure-processor and job-runner", stage, users)
		}
	}
}
