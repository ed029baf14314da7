package routes

import "slices"

// Secret is a key functions read from Secrets Manager when they start.
// The stack creates one secret per declaration and gives each function
// that reads it the secret's ARN and a grant to read that secret, never
// the key itself: a function's environment is readable by anyone allowed
// lambda:GetFunctionConfiguration. Every function reads LogKey; the
// others are declared in Uses.Secrets.
type Secret struct {
	// Name names the secret's construct (<Name>Secret) and output
	// (<Name>SecretArn).
	Name string
	// Purpose completes "the key that …" in descriptions and errors.
	Purpose string
	// ARNVar carries the secret's ARN to a deployed function.
	ARNVar string
	// KeyVar carries the key itself where no Secrets Manager holds it:
	// binaries pointed straight at the local stack (`make invoke`), tests.
	KeyVar string
	// Local is the local stage's key when neither variable is set: fixed,
	// so that what one local process signs or hashes another reads.
	Local string
	// Rotates is true when the key may be rotated: functions read its
	// AWSPREVIOUS version too, and still accept what was made under it.
	Rotates bool
}

// The secrets.
var (
	// CursorKey signs pagination cursors.
	CursorKey = Secret{
		Name: "Cursor", Purpose: "signs pagination cursors",
		ARNVar: "RALLY_SECRET_ARN", KeyVar: "RALLY_CURSOR_KEY", Local: "rally-local-cursor-key",
		Rotates: true,
	}
	// LogKey keys the hashes logs name users by (obs.UserHash). It never
	// rotates: a rotation would split a user's log lines between two
	// hashes.
	LogKey = Secret{
		Name: "LogKey", Purpose: "keys the user hashes in logs",
		ARNVar: "RALLY_LOG_KEY_ARN", KeyVar: "RALLY_LOG_KEY", Local: "rally-local-log-key",
	}
	// ErasureKey keys the hashes erasure records are kept under
	// (privacy.Hasher). A secret of its own, not one derived from the log
	// key: it rotates while the log key never does, and operators who
	// read the log key to find a user's log lines need not be able to
	// test whether an id was erased.
	ErasureKey = Secret{
		Name: "ErasureKey", Purpose: "keys the user hashes erasure records are kept under",
		ARNVar: "RALLY_ERASURE_KEY_ARN", KeyVar: "RALLY_ERASURE_KEY", Local: "rally-local-erasure-key",
		Rotates: true,
	}
)

// Secrets lists every secret.
func Secrets() []Secret { return []Secret{CursorKey, LogKey, ErasureKey} }

// Keys lists the secrets a function with uses u reads at start: the log
// key, which every function names users in its logs by, then those it
// declares.
func (u Uses) Keys() []Secret {
	return MergeSecrets([]Secret{LogKey}, u.Secrets)
}

// Reads reports whether a function with uses u reads secret s.
func (u Uses) Reads(s Secret) bool { return slices.Contains(u.Keys(), s) }

// MergeSecrets is a and b, each once, in order.
func MergeSecrets(a, b []Secret) []Secret {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
