package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/rallyhq/rally/shared/exports"
	"github.com/rallyhq/rally/shared/routes"
)

// ExportsProps configures the exports bucket.
type ExportsProps struct {
	// AccessLogs receives the bucket's server access logs (the analytics
	// access-log bucket).
	AccessLogs awss3.IBucket
}

// Exports owns the bucket users' export documents are written to
// (shared/exports): private, encrypted, reachable over TLS only, each
// document expiring a few days after it was written.
type Exports struct {
	constructs.Construct
	Bucket awss3.Bucket
}

// NewExports creates the exports bucket. It is retained whatever the
// stage, as the analytics buckets are (CloudFormation cannot delete a
// bucket that still holds objects); its lifecycle empties it within
// exports.Retention and a day.
func NewExports(scope constructs.Construct, id string, props ExportsProps) *Exports {
	e := &Exports{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	e.Bucket = awss3.NewBucket(e.Construct, jsii.String("Documents"), &awss3.BucketProps{
		Encryption:             awss3.BucketEncryption_S3_MANAGED,
		BlockPublicAccess:      awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:             jsii.Bool(true),
		ObjectOwnership:        awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		RemovalPolicy:          awscdk.RemovalPolicy_RETAIN,
		ServerAccessLogsBucket: props.AccessLogs,
		ServerAccessLogsPrefix: jsii.String("exports-bucket/"),
		LifecycleRules: &[]*awss3.LifecycleRule{{
			// S3 counts whole days from an object's creation.
			Id: jsii.String("expire-exports"), Prefix: jsii.String(exports.Prefix), Expiration: days(exports.Retention),
		}, {
			Id: jsii.String("abort-incomplete-uploads"), AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
		}},
	})
	return e
}

// grant gives fn what d does with export documents, on the documents'
// prefix only (and the bucket's listing, for an erasure), and tells it the
// bucket.
func (e *Exports) grant(fn awslambda.Function, d routes.Documents) {
	if d == 0 {
		return
	}
	fn.AddEnvironment(jsii.String("RALLY_EXPORT_BUCKET"), e.Bucket.BucketName(), nil)
	if archive := d.Archive(); len(archive) > 0 {
		fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings(archive...),
			Resources: jsii.Strings(*e.Bucket.ArnForObjects(jsii.String(routes.ArchivePrefix + "*"))),
		}))
		suppress(fn.Role(), "IAM5", "Closed leaderboard periods are archived under the exports bucket's "+routes.ArchivePrefix+" prefix "+
			"(<bucket ARN>/"+routes.ArchivePrefix+"*): one object per part of a board period, named by the board and period it closes.", archiveWildcard)
	}
	objects, list := d.S3()
	if len(objects) == 0 {
		return
	}
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(objects...),
		Resources: jsii.Strings(*e.Bucket.ArnForObjects(jsii.String(exports.Prefix + "*"))),
	}))
	if list {
		fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings("s3:ListBucket"),
			Resources: &[]*string{e.Bucket.BucketArn()},
		}))
	}
	suppress(fn.Role(), "IAM5", "Export documents are granted on the exports bucket's "+exports.Prefix+" prefix "+
		"(<bucket ARN>/"+exports.Prefix+"*): each object is one user's export, named by a hash of the user and the "+
		"export id, unknown until it is written.", exportsWildcard)
}

// exportsWildcard matches the S3 grant on the export documents' prefix.
var exportsWildcard = &cdknag.RegexAppliesTo{Regex: jsii.String(`/^Resource::<[A-Za-z0-9]+\.Arn>\/exports\/\*$/g`)}

// archiveWildcard matches the S3 grant on the archive's prefix.
var archiveWildcard = &cdknag.RegexAppliesTo{Regex: jsii.String(`/^Resource::<[A-Za-z0-9]+\.Arn>\/archive\/\*$/g`)}
