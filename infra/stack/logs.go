package stack

import (
	"fmt"
	"sort"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
)

// retentionDays are the retention periods CloudWatch Logs accepts.
var retentionDays = map[int]awslogs.RetentionDays{
	1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
	7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
	60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
	150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
	400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS, 731: awslogs.RetentionDays_TWO_YEARS,
	1096: awslogs.RetentionDays_THREE_YEARS, 1827: awslogs.RetentionDays_FIVE_YEARS, 2192: awslogs.RetentionDays_SIX_YEARS,
	2557: awslogs.RetentionDays_SEVEN_YEARS, 2922: awslogs.RetentionDays_EIGHT_YEARS, 3288: awslogs.RetentionDays_NINE_YEARS,
	3653: awslogs.RetentionDays_TEN_YEARS,
}

// RetentionFromDays maps a number of days to a CloudWatch Logs retention
// period; only the periods CloudWatch accepts are valid.
func RetentionFromDays(days int) (awslogs.RetentionDays, error) {
	if r, ok := retentionDays[days]; ok {
		return r, nil
	}
	valid := make([]int, 0, len(retentionDays))
	for d := range retentionDays {
		valid = append(valid, d)
	}
	sort.Ints(valid)
	return "", fmt.Errorf("%w: log retention of %d days is not one CloudWatch Logs offers %v", ErrInvalidProps, days, valid)
}
