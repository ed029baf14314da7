package stack

import (
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// suppress records why a cdk-nag AwsSolutions finding does not apply to
// construct and its children. appliesTo narrows a granular rule (IAM5) to
// the listed findings: strings, or *cdknag.RegexAppliesTo.
func suppress(construct any, rule, reason string, appliesTo ...any) {
	suppressRule(construct, "AwsSolutions-"+rule, reason, appliesTo...)
}

// suppressServerless records why a cdk-nag Serverless finding does not
// apply to construct and its children.
func suppressServerless(construct any, rule, reason string) {
	suppressRule(construct, "Serverless-"+rule, reason)
}

func suppressRule(construct any, id, reason string, appliesTo ...any) {
	s := &cdknag.NagPackSuppression{Id: jsii.String(id), Reason: jsii.String(reason)}
	if len(appliesTo) > 0 {
		s.AppliesTo = &appliesTo
	}
	cdknag.NagSuppressions_AddResourceSuppressions(construct, &[]*cdknag.NagPackSuppression{s}, jsii.Bool(true))
}

// versionWildcard matches lambda:InvokeFunction granted on a function's
// versions and aliases (<function ARN>:*).
var versionWildcard = &cdknag.RegexAppliesTo{Regex: jsii.String(`/^Resource::<[A-Za-z0-9]+\.Arn>:\*$/g`)}

// executeAPIWildcard matches execute-api:Invoke granted on a route whose
// path has parameters (<api ARN>/$default/PUT/v1/games/*).
var executeAPIWildcard = &cdknag.RegexAppliesTo{Regex: jsii.String(`/^Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<[A-Za-z0-9]+>\/.*\*.*$/g`)}
