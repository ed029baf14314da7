package testenv

import "os"

// ScaleEnv set to "full" runs the property and load tests at the sizes
// they were first written for (minutes each on a small machine); by default
// they run at sizes that keep every property exercised — ties, period
// boundaries, concurrent writers, outages — in a suite that takes minutes.
const ScaleEnv = "RALLY_TEST_SCALE"

// Scale is n by default and full under RALLY_TEST_SCALE=full.
func Scale(n, full int) int {
	if os.Getenv(ScaleEnv) == "full" {
		return full
	}
	return n
}
