package stack_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"

	"github.com/rallyhq/rally/infra/stack"
	"github.com/rallyhq/rally/shared/config"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

func processorOn(name string, source schema.Table) routes.Processor {
	p := routes.CounterProcessor
	p.Function, p.Source = name, source
	return p
}

// Declarations that cannot be deployed fail before anything is created,
// with an error that says what to change.
func TestNewRejectsWhatCannotBeDeployed(t *testing.T) {
	extra := []string{"rank-processor", "export-processor", "games-processor"}
	dir := t.TempDir()
	if err := fakeBuild(dir, append(routes.Functions(), extra...)); err != nil {
		t.Fatal(err)
	}
	valid := stack.Props{Stage: "dev", BuildDir: dir}
	tests := []struct {
		name   string
		change func(*stack.Props)
		want   []string
	}{{
		name: "three readers on one stream",
		change: func(p *stack.Props) {
			p.Processors = []routes.Processor{routes.CounterProcessor,
				processorOn("rank-processor", schema.Reactions), processorOn("export-processor", schema.Reactions)}
		},
		want: []string{"table Reactions has 3 stream readers", "counter-processor, rank-processor, export-processor", "at most 2"},
	}, {
		name: "one function reading one stream twice",
		change: func(p *stack.Props) {
			p.Processors = []routes.Processor{routes.AnalyticsShipper, routes.AnalyticsShipper}
		},
		want: []string{"processor analytics-shipper reads the Reactions stream twice"},
	}, {
		name: "one function with two schedules",
		change: func(p *stack.Props) {
			other := processorOn(routes.CounterProcessor.Function, schema.Scores)
			other.Tick = 5 * time.Minute
			p.Processors = []routes.Processor{routes.CounterProcessor, other}
		},
		want: []string{"processor counter-processor: its declarations disagree on Tick (1m0s, 5m0s)"},
	}, {
		name: "a route's function also declared as a processor",
		change: func(p *stack.Props) {
			p.Processors = []routes.Processor{processorOn(routes.PutGame.Function, schema.Reactions)}
		},
		want: []string{"function put-game is declared as both a route and a processor"},
	}, {
		name:   "processor on a table without a stream",
		change: func(p *stack.Props) { p.Processors = []routes.Processor{processorOn("games-processor", schema.Games)} },
		want:   []string{"games-processor reads table Games, which declares no stream"},
	}, {
		name: "unbounded retries",
		change: func(p *stack.Props) {
			proc := routes.CounterProcessor
			proc.MaxRetries = -1
			p.Processors = []routes.Processor{proc}
		},
		want: []string{"counter-processor: MaxRetries -1 must be 0-10000"},
	}, {
		name: "record age beyond the stream's reach",
		change: func(p *stack.Props) {
			proc := routes.CounterProcessor
			proc.MaxRecordAge = 30 * 24 * time.Hour
			p.Processors = []routes.Processor{proc}
		},
		want: []string{"counter-processor: MaxRecordAge 720h0m0s must be 1m-12h0m0s"},
	}, {
		name: "route using an undeclared table",
		change: func(p *stack.Props) {
			r := routes.PutGame
			r.Uses.Calls = []routes.Call{routes.On(schema.Table{Name: "Unknown"}, routes.PutItem)}
			p.Routes = []routes.Route{r}
		},
		want: []string{"put-game uses table Unknown, which is not declared"},
	}, {
		name: "calls the stack cannot grant",
		change: func(p *stack.Props) {
			r := routes.PutGame
			r.Uses.Calls = []routes.Call{
				routes.On(schema.Games, 0), routes.OnIndex(schema.Games, "by_title", routes.Query),
				routes.OnIndex(schema.Reactions, schema.IndexReactionsByTime, routes.Query|routes.GetItem),
			}
			p.Routes = []routes.Route{r}
		},
		want: []string{"put-game calls nothing on Games", "put-game reads index by_title, which table Games does not declare",
			"put-game calls GetItem|Query on index Reactions/index/by_time: an index takes Query and Scan only"},
	}, {
		name:   "stage not usable in resource names",
		change: func(p *stack.Props) { p.Stage = "Prod_EU" },
		want:   []string{`stage "Prod_EU"`},
	}, {
		// Its functions would start on the local stack's built-in keys.
		name:   "the local stack's stage",
		change: func(p *stack.Props) { p.Stage = config.LocalStage },
		want:   []string{`stage "local" is the local stack's`},
	}, {
		name:   "issuer without audience",
		change: func(p *stack.Props) { p.JWTIssuer = "https://auth.example.com/" },
		want:   []string{"jwtIssuer and jwtAudience must be given together"},
	}, {
		name: "issuer not https",
		change: func(p *stack.Props) {
			p.JWTIssuer, p.JWTAudience = "http://auth.example.com/", []string{"game"}
		},
		want: []string{`jwtIssuer "http://auth.example.com/" must be an https URL`},
	}, {
		name:   "unknown cache engine",
		change: func(p *stack.Props) { p.RedisEngine = "memcached" },
		want:   []string{`redis engine "memcached"`},
	}, {
		name:   "negative stage throttling",
		change: func(p *stack.Props) { p.ThrottleRate, p.ThrottleBurst = -1, -5 },
		want:   []string{"throttleRate -1 must be a positive number", "throttleBurst -5 must be a positive number"},
	}, {
		name:   "a reservation for a route",
		change: func(p *stack.Props) { p.Reserved = map[string]int{routes.PutGame.Function: 5} },
		want:   []string{"reservedConcurrency names put-game, which is no stream processor or queue consumer"},
	}, {
		name:   "no concurrency at all",
		change: func(p *stack.Props) { p.Reserved = map[string]int{routes.CounterProcessor.Function: 0} },
		want:   []string{"function counter-processor: reserved concurrency 0 must be at least 1"},
	}, {
		name:   "fewer invocations than streams",
		change: func(p *stack.Props) { p.Reserved = map[string]int{routes.AnalyticsShipper.Function: 2} },
		want:   []string{"function analytics-shipper: reserved concurrency 2 is less than the 3 streams it reads"},
	}, {
		name: "one function with two reservations",
		change: func(p *stack.Props) {
			other := processorOn(routes.CounterProcessor.Function, schema.Scores)
			other.Reserved = 7
			p.Processors = []routes.Processor{routes.CounterProcessor, other}
		},
		want: []string{"processor counter-processor: its declarations disagree on Reserved (50, 7)"},
	}, {
		name:   "reservations an account cannot give",
		change: func(p *stack.Props) { p.AccountConcurrency = 200 },
		want:   []string{"an account with 200 concurrent executions may reserve at most 100", "lower reservedConcurrency or raise the quota"},
	}, {
		name: "origins a browser never sends",
		change: func(p *stack.Props) {
			p.CORSOrigins = []string{"https://play.example.com/", "play.example.com", "https://play.example.com/game",
				"ftp://files.example.com", "https://*.example.com", "https://Play.example.com"}
		},
		want: []string{`"https://play.example.com/" must be scheme://host[:port] with no path`,
			`"play.example.com" must start with https:// or http://`, `"https://play.example.com/game" must be scheme://host[:port]`,
			`"ftp://files.example.com" must start with https://`, `"https://*.example.com": wildcards in a host are not supported`,
			`"https://Play.example.com" must be lowercase`},
	}, {
		name:   "every origin with credentials",
		change: func(p *stack.Props) { p.CORSOrigins, p.CORSCredentials = []string{"*"}, true },
		want:   []string{`corsOrigins: "*" cannot be combined with corsAllowCredentials`},
	}, {
		name:   "credentials without origins",
		change: func(p *stack.Props) { p.CORSCredentials = true },
		want:   []string{"corsAllowCredentials needs corsOrigins"},
	}, {
		// A route no role may call would deploy unreachable; one the
		// game server may call by omission, open to it.
		name: "a service route that declares no role",
		change: func(p *stack.Props) {
			r := routes.StartJob
			r.Role = ""
			p.Routes = []routes.Route{r}
		},
		want: []string{`service route POST /v1/ops/jobs declares no role ("")`},
	}, {
		name: "role principals that are no IAM role or user",
		change: func(p *stack.Props) {
			p.GameServerRoleARNs = []string{"game-backend"}
			p.OperatorRoleARNs = []string{"arn:aws:sts::123456789012:assumed-role/ops/me"}
		},
		want: []string{`gameServerRoleArns: "game-backend" is not an IAM role or user ARN`,
			`operatorRoleArns: "arn:aws:sts::123456789012:assumed-role/ops/me" is not an IAM role or user ARN`},
	}, {
		name: "one principal as both roles",
		change: func(p *stack.Props) {
			p.GameServerRoleARNs = []string{"arn:aws:iam::123456789012:role/backend"}
			p.OperatorRoleARNs = []string{"arn:aws:iam::123456789012:role/backend"}
		},
		want: []string{`"arn:aws:iam::123456789012:role/backend" is given as both a game server and an operator`},
	}, {
		name:   "functions not built",
		change: func(p *stack.Props) { p.BuildDir = t.TempDir() },
		want:   []string{"function favorite-game has no build", "run make build"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			props := valid
			tc.change(&props)
			app := awscdk.NewApp(nil)
			s, err := stack.New(app, "Rally-invalid", props)
			if !errors.Is(err, stack.ErrInvalidProps) {
				t.Fatalf("New() = %v, %v; want an error wrapping ErrInvalidProps", s, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if n := len(*app.Node().Children()); n != 0 {
				t.Errorf("a rejected stack left %d constructs in the app", n)
			}
		})
	}
}

func TestRetentionFromDaysAcceptsOnlyCloudWatchPeriods(t *testing.T) {
	for days, want := range map[int]awslogs.RetentionDays{
		1: awslogs.RetentionDays_ONE_DAY, 30: awslogs.RetentionDays_ONE_MONTH, 3653: awslogs.RetentionDays_TEN_YEARS,
	} {
		if got, err := stack.RetentionFromDays(days); err != nil || got != want {
			t.Errorf("RetentionFromDays(%d) = %v, %v; want %v", days, got, err, want)
		}
	}
	for _, days := range []int{0, 31, -7} {
		if _, err := stack.RetentionFromDays(days); !errors.Is(err, stack.ErrInvalidProps) {
			t.Errorf("RetentionFromDays(%d) = %v; want ErrInvalidProps", days, err)
		}
	}
}
