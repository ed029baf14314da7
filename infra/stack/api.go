package stack

import (
	"regexp"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscognito"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/rallyhq/rally/shared/routes"
)

// StageName is the API's one stage, served at the root of its URL.
const StageName = "$default"

// APIProps configures the HTTP API.
type APIProps struct {
	Stage        string
	Routes       []routes.Route
	Functions    *Functions
	JWTIssuer    string
	JWTAudience  []string
	LogRetention awslogs.RetentionDays
	Protect      bool
	// ThrottleRate and ThrottleBurst are the stage's default route
	// throttling, for all callers together.
	ThrottleRate  float64
	ThrottleBurst int
	// GameServerRoleARNs and OperatorRoleARNs are existing roles (or
	// users) that act as the game server and as the operator
	// (routes.Role); for a role given none, the API creates one.
	GameServerRoleARNs []string
	OperatorRoleARNs   []string
	// CORSOrigins are the web origins browsers may call the API from; none
	// configures no CORS at all (mobile and server clients need none).
	// CORSCredentials lets browsers send cookies and other credentials.
	CORSOrigins     []string
	CORSCredentials bool
}

// API owns the HTTP API: one route per declaration, each integrated with its
// own function; Player routes behind a JWT authorizer, Service routes behind
// IAM (SigV4).
type API struct {
	constructs.Construct
	HttpApi awsapigatewayv2.HttpApi
	// URL is the base URL of the API's default stage.
	URL *string
	// UserPool and UserPoolClient are nil when an external issuer is used.
	UserPool       awscognito.UserPool
	UserPoolClient awscognito.UserPoolClient
	// GameServerRole and OperatorRole are the roles the API creates for
	// service callers; each nil when existing ones were given for it.
	GameServerRole awsiam.Role
	OperatorRole   awsiam.Role
	// Principals says who acts as each role: the created role's ARN or
	// the given ones. A function admits the principals of the roles its
	// routes admit (AllowList).
	Principals routes.Principals
}

// AllowList is what the function named function admits on its service
// routes among rs (RALLY_SERVICE_ROLES): the principals of the roles those
// routes admit, as a comma-separated list; nil when it serves none.
func (a *API) AllowList(rs []routes.Route, function string) *string {
	roles := routes.AdmittedBy(rs, function)
	if len(roles) == 0 {
		return nil
	}
	return awscdk.Fn_Join(jsii.String(","), jsii.Strings(a.Principals.Of(roles)...))
}

// NewAPI creates the API, its authorizers and routes.
func NewAPI(scope constructs.Construct, id string, props APIProps) *API {
	a := &API{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	a.HttpApi = awsapigatewayv2.NewHttpApi(a.Construct, jsii.String("Http"), &awsapigatewayv2.HttpApiProps{
		ApiName:     jsii.String("rally-" + props.Stage),
		Description: jsii.String("Rally engagement API (" + props.Stage + ")"),
		// The default stage is added below, with access logs.
		CreateDefaultStage: jsii.Bool(false),
		CorsPreflight:      corsPreflight(props),
	})
	accessLogs := awslogs.NewLogGroup(a.Construct, jsii.String("AccessLogs"), &awslogs.LogGroupProps{
		Retention: props.LogRetention, RemovalPolicy: removal(props.Protect),
	})
	stage := a.HttpApi.AddStage(jsii.String("DefaultStage"), &awsapigatewayv2.HttpStageOptions{
		StageName:         jsii.String(StageName),
		AutoDeploy:        jsii.Bool(true),
		AccessLogSettings: &accessLogSettings{destination: awsapigatewayv2.NewLogGroupLogDestination(accessLogs)},
		// Metrics per route (requests, 5xx, latency) for the alarms and
		// the dashboards; CloudWatch bills them as custom metrics.
		DetailedMetricsEnabled: jsii.Bool(true),
		// Caps the total before any Lambda runs: a flood answers 429 here
		// instead of taking the account's concurrency from the processors.
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(props.ThrottleRate),
			BurstLimit: jsii.Number(float64(props.ThrottleBurst)),
		},
	})
	a.URL = stage.Url()
	a.serviceRoles(props)

	player := a.playerAuthorizer(props)
	service := awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	for _, r := range props.Routes {
		var auth awsapigatewayv2.IHttpRouteAuthorizer = player
		if r.Auth == routes.Service {
			auth = service
		}
		fn := props.Functions.Get(r.Function)
		a.HttpApi.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(r.Method)},
			Integration: awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(routes.Camel(r.Function)), fn, nil),
			Authorizer:  auth,
		})
	}
	return a
}

// corsPreflight is the API's CORS configuration, nil without origins: API
// Gateway then answers preflights itself (no OPTIONS route, no authorizer)
// and adds the allow and expose headers to every response to an allowed
// origin, errors and 429s included.
func corsPreflight(props APIProps) *awsapigatewayv2.CorsPreflightOptions {
	if len(props.CORSOrigins) == 0 {
		return nil
	}
	var methods []awsapigatewayv2.CorsHttpMethod
	for _, m := range routes.Methods(props.Routes) {
		methods = append(methods, awsapigatewayv2.CorsHttpMethod(m))
	}
	return &awsapigatewayv2.CorsPreflightOptions{
		AllowOrigins:     jsii.Strings(props.CORSOrigins...),
		AllowMethods:     &methods,
		AllowHeaders:     jsii.Strings(routes.CORSAllowHeaders...),
		ExposeHeaders:    jsii.Strings(routes.CORSExposeHeaders...),
		AllowCredentials: jsii.Bool(props.CORSCredentials),
		MaxAge:           awscdk.Duration_Seconds(jsii.Number(routes.CORSMaxAge.Seconds())),
	}
}

// serviceRoles creates the roles service callers assume, each unless
// existing ones were given for it (or no route admits it):
// rally-<stage>-game-server and
// rally-<stage>-operator, assumable by principals of this account whose
// own policies allow it, each allowed to invoke the service routes that
// admit it (routes.Route.Admits) and nothing else. The functions admit
// only these (AllowList): IAM authorization alone lets in any principal
// of the account that may invoke the API.
func (a *API) serviceRoles(props APIProps) {
	a.Principals = routes.Principals{
		routes.GameServer: props.GameServerRoleARNs,
		routes.Operator:   props.OperatorRoleARNs,
	}
	role := func(r routes.Role, id, description string) awsiam.Role {
		if len(a.Principals[r]) > 0 {
			return nil
		}
		var arns []*string
		for _, rt := range props.Routes {
			if rt.Admits(r) {
				path := pathParam.ReplaceAllString(rt.Path, "*")
				arns = append(arns, a.HttpApi.ArnForExecuteApi(jsii.String(rt.Method), jsii.String(path), jsii.String(StageName)))
			}
		}
		if len(arns) == 0 {
			return nil // no route admits it
		}
		invoke := awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &[]awsiam.PolicyStatement{
			awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{Actions: jsii.Strings("execute-api:Invoke"), Resources: &arns}),
		}})
		created := awsiam.NewRole(a.Construct, jsii.String(id), &awsiam.RoleProps{
			RoleName:       jsii.String("rally-" + props.Stage + "-" + string(r)),
			AssumedBy:      awsiam.NewAccountRootPrincipal(),
			Description:    jsii.String(description),
			InlinePolicies: &map[string]awsiam.PolicyDocument{"InvokeServiceRoutes": invoke},
		})
		suppress(created, "IAM5", "The role may invoke each service route it is admitted to; a path parameter "+
			"({player_id}) is a wildcard segment of its execute-api ARN.", executeAPIWildcard)
		a.Principals[r] = []string{*created.RoleArn()}
		return created
	}
	a.GameServerRole = role(routes.GameServer, "GameServerRole",
		"Rally "+props.Stage+": game servers assume it to call the game routes (board definitions, scores, match activity, games, profiles, friends)")
	a.OperatorRole = role(routes.Operator, "OperatorRole",
		"Rally "+props.Stage+": operators assume it to call every service route (/v1/ops: health, jobs, dead letters, bans, erasures; score removal)")
}

// pathParam matches a route path's {parameter} segments.
var pathParam = regexp.MustCompile(`\{[^}/]+\}`)

// playerAuthorizer validates player tokens: from the external issuer when
// one is configured, otherwise from a user pool this stack creates.
func (a *API) playerAuthorizer(props APIProps) awsapigatewayv2.IHttpRouteAuthorizer {
	if props.JWTIssuer != "" {
		return awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("Players"), jsii.String(props.JWTIssuer),
			&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{JwtAudience: jsii.Strings(props.JWTAudience...)})
	}
	a.UserPool = awscognito.NewUserPool(a.Construct, jsii.String("Players"), &awscognito.UserPoolProps{
		SelfSignUpEnabled: jsii.Bool(true),
		SignInAliases:     &awscognito.SignInAliases{Email: jsii.Bool(true)},
		AutoVerify:        &awscognito.AutoVerifiedAttrs{Email: jsii.Bool(true)},
		AccountRecovery:   awscognito.AccountRecovery_EMAIL_ONLY,
		PasswordPolicy: &awscognito.PasswordPolicy{
			MinLength:        jsii.Number(12),
			RequireLowercase: jsii.Bool(true),
			RequireUppercase: jsii.Bool(true),
			RequireDigits:    jsii.Bool(true),
			RequireSymbols:   jsii.Bool(true),
		},
		Mfa:                awscognito.Mfa_OPTIONAL,
		MfaSecondFactor:    &awscognito.MfaSecondFactor{Otp: jsii.Bool(true), Sms: jsii.Bool(false)},
		FeaturePlan:        awscognito.FeaturePlan_ESSENTIALS,
		DeletionProtection: jsii.Bool(props.Protect),
		RemovalPolicy:      removal(props.Protect),
	})
	suppress(a.UserPool, "COG2", "Players opt in to TOTP MFA; requiring it would block sign-up for a game "+
		"audience. Deployments that need more set jwtIssuer to their own identity provider.")
	suppress(a.UserPool, "COG3", "Threat protection (ENFORCED advanced security) needs the Cognito Plus plan, "+
		"billed per monthly active user; this pool is a starting point and production deployments are "+
		"expected to enable it or bring their own issuer (jwtIssuer).")
	suppress(a.UserPool, "COG8", "The Plus feature plan (threat protection) is billed per monthly active user; "+
		"the pool uses Essentials as a starting point, and production deployments choose Plus or bring their own "+
		"issuer (jwtIssuer).")
	// A public client: game apps cannot keep a secret.
	a.UserPoolClient = a.UserPool.AddClient(jsii.String("GameClient"), &awscognito.UserPoolClientOptions{
		AuthFlows:                  &awscognito.AuthFlow{UserSrp: jsii.Bool(true)},
		GenerateSecret:             jsii.Bool(false),
		PreventUserExistenceErrors: jsii.Bool(true),
		EnableTokenRevocation:      jsii.Bool(true),
		DisableOAuth:               jsii.Bool(true),
		AccessTokenValidity:        awscdk.Duration_Hours(jsii.Number(1)),
		IdTokenValidity:            awscdk.Duration_Hours(jsii.Number(1)),
		RefreshTokenValidity:       awscdk.Duration_Days(jsii.Number(30)),
	})
	return awsapigatewayv2authorizers.NewHttpUserPoolAuthorizer(jsii.String("Players"), a.UserPool,
		&awsapigatewayv2authorizers.HttpUserPoolAuthorizerProps{UserPoolClients: &[]awscognito.IUserPoolClient{a.UserPoolClient}})
}

// accessLogSettings implements awsapigatewayv2.IAccessLogSettings.
type accessLogSettings struct {
	destination awsapigatewayv2.IAccessLogDestination
}

func (s *accessLogSettings) Destination() awsapigatewayv2.IAccessLogDestination { return s.destination }

// Format is one JSON object per request, with what an operator needs to
// follow a request into the function's logs and traces.
func (s *accessLogSettings) Format() awsapigateway.AccessLogFormat {
	return awsapigateway.AccessLogFormat_Custom(jsii.String(`{"requestId":"$context.requestId",` +
		`"ip":"$context.identity.sourceIp","requestTime":"$context.requestTime",` +
		`"routeKey":"$context.routeKey","status":"$context.status","protocol":"$context.protocol",` +
		`"responseLength":"$context.responseLength","latencyMs":"$context.responseLatency",` +
		`"integrationLatencyMs":"$context.integrationLatency","integrationError":"$context.integrationErrorMessage",` +
		`"authorizerError":"$context.authorizer.error","lambdaRequestId":"$context.integration.requestId"}`))
}
