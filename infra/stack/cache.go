package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticache"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// CacheProps configures the cache and its network.
type CacheProps struct {
	Stage        string
	Engine       string
	LogRetention awslogs.RetentionDays
	Protect      bool
	// SecretsEndpoint adds a Secrets Manager interface endpoint, needed
	// when a function in the VPC reads a secret at start (every function
	// reads the log key's).
	SecretsEndpoint bool
}

// Cache owns the ElastiCache Serverless cache and the network it lives in: a
// VPC of isolated subnets in two AZs (no NAT: functions there reach only the
// cache and, through a gateway endpoint, DynamoDB) and the security group
// Redis-using functions run in, the only one the cache admits.
type Cache struct {
	constructs.Construct
	Vpc awsec2.Vpc
	// FunctionSecurityGroup is attached to every function that uses Redis.
	FunctionSecurityGroup awsec2.SecurityGroup
	// URL is rediss://host:port, the value of RALLY_REDIS_URL.
	URL *string
}

// cachePorts are the serverless cache's primary (6379) and
// read-from-replica (6380) endpoints.
func cachePorts() awsec2.Port { return awsec2.Port_TcpRange(jsii.Number(6379), jsii.Number(6380)) }

// majorVersion is the engine version line each engine is pinned to, so a
// new major release is adopted deliberately.
var majorVersion = map[string]string{EngineValkey: "8", EngineRedis: "7"}

// NewCache creates the VPC, security groups and serverless cache.
func NewCache(scope constructs.Construct, id string, props CacheProps) *Cache {
	c := &Cache{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	isolated := &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED}
	c.Vpc = awsec2.NewVpc(c.Construct, jsii.String("Vpc"), &awsec2.VpcProps{
		MaxAzs:      jsii.Number(2),
		NatGateways: jsii.Number(0),
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{{
			Name: jsii.String("isolated"), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(22),
		}},
		// Nothing runs in the default security group; locking it down needs a
		// custom-resource Lambda this stack would otherwise not have.
		RestrictDefaultSecurityGroup: jsii.Bool(false),
		GatewayEndpoints: &map[string]*awsec2.GatewayVpcEndpointOptions{
			"DynamoDB": {Service: awsec2.GatewayVpcEndpointAwsService_DYNAMODB(), Subnets: &[]*awsec2.SubnetSelection{isolated}},
		},
	})
	// Rejected flows are what explain a function that cannot reach the cache.
	c.Vpc.AddFlowLog(jsii.String("RejectedFlows"), &awsec2.FlowLogOptions{
		TrafficType: awsec2.FlowLogTrafficType_REJECT,
		Destination: awsec2.FlowLogDestination_ToCloudWatchLogs(awslogs.NewLogGroup(c.Construct, jsii.String("FlowLogs"), &awslogs.LogGroupProps{
			Retention: props.LogRetention, RemovalPolicy: removal(props.Protect),
		}), nil),
	})

	c.FunctionSecurityGroup = awsec2.NewSecurityGroup(c.Construct, jsii.String("FunctionSecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              c.Vpc,
		Description:      jsii.String("Rally functions that use the cache"),
		AllowAllOutbound: jsii.Bool(false),
	})
	cacheSG := awsec2.NewSecurityGroup(c.Construct, jsii.String("CacheSecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              c.Vpc,
		Description:      jsii.String("Rally serverless cache: admits only Rally functions"),
		AllowAllOutbound: jsii.Bool(false),
	})
	cacheSG.AddIngressRule(c.FunctionSecurityGroup, cachePorts(), jsii.String("Rally functions to the cache"), nil)
	c.FunctionSecurityGroup.AddEgressRule(cacheSG, cachePorts(), jsii.String("to the cache"), nil)
	// Isolated subnets route only inside the VPC and to the DynamoDB gateway
	// endpoint, so HTTPS "anywhere" reaches DynamoDB and interface endpoints
	// and nothing else; DynamoDB's prefix list id would need an account lookup.
	c.FunctionSecurityGroup.AddEgressRule(awsec2.Peer_AnyIpv4(), awsec2.Port_Tcp(jsii.Number(443)),
		jsii.String("HTTPS to DynamoDB (gateway endpoint) and VPC endpoints"), nil)

	if props.SecretsEndpoint {
		c.Vpc.AddInterfaceEndpoint(jsii.String("SecretsManager"), &awsec2.InterfaceVpcEndpointOptions{
			Service:           awsec2.InterfaceVpcEndpointAwsService_SECRETS_MANAGER(),
			Subnets:           isolated,
			Open:              jsii.Bool(false),
			PrivateDnsEnabled: jsii.Bool(true),
		}).Connections().AllowDefaultPortFrom(c.FunctionSecurityGroup, jsii.String("Rally functions to Secrets Manager"))
	}

	subnets := c.Vpc.SelectSubnets(isolated).SubnetIds
	subnetIDs := make([]interface{}, 0, len(*subnets))
	for _, s := range *subnets {
		subnetIDs = append(subnetIDs, s)
	}
	cache := awselasticache.NewCfnServerlessCache(c.Construct, jsii.String("Serverless"), &awselasticache.CfnServerlessCacheProps{
		ServerlessCacheName: jsii.String("rally-" + props.Stage),
		Description:         jsii.String("Rally rankings, counters and caches (rebuildable from DynamoDB)"),
		Engine:              jsii.String(props.Engine),
		MajorEngineVersion:  jsii.String(majorVersion[props.Engine]),
		SecurityGroupIds:    &[]interface{}{cacheSG.SecurityGroupId()},
		SubnetIds:           &subnetIDs,
	})
	// Serverless caches always require TLS; the client must say rediss://.
	c.URL = awscdk.Fn_Join(jsii.String(""), &[]*string{
		jsii.String("rediss://"), cache.AttrEndpointAddress(), jsii.String(":"), cache.AttrEndpointPort(),
	})
	return c
}
