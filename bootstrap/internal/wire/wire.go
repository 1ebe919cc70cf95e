// Package wire is what the two sides of the bootstrap share: a PE
// (package bootstrap) and its agent (package bootstrap/cluster). It holds
// the messages that PEs, agents and the seed exchange (their codec), the
// local channel between a PE and its agent (frames on a unix socket pair,
// which may carry a descriptor), the table file in which an agent
// publishes an allgather's result to its PEs, the check of job ids
// (internal/jobkey checks keys), and the log adapter. It imports neither memberlist nor anything a
// PE does not need: every PE binary links it.
package wire

import "time"

// MinFailureTimeout bounds the failure timeout from below: shorter ones
// make an overloaded host look dead.
const MinFailureTimeout = 500 * time.Millisecond

// ValidJobID reports whether s is a job id: 1 to MaxJobID bytes of
// [A-Za-z0-9._-].
func ValidJobID(s string) bool {
	if len(s) < 1 || len(s) > MaxJobID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Clip cuts s to the longest string a message carries.
func Clip(s string) string {
	if len(s) > MaxString {
		return s[:MaxString]
	}
	return s
}
