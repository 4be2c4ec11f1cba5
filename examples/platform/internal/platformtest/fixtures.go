package platformtest

import "time"

// TestToken is the admin's token in the tests' token files.
const TestToken = "s3cret"

// T0 is the tests' start of time: the clocks they give the platform
// start here, and their seeds' routes are dated from it.
var T0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
