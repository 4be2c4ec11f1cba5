package platformtest

// HookSecret and HookSecret2 are two receivers' secrets, as while one
// is rotated.
const (
	HookSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	HookSecret2 = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0MjQy"
)
