// Package ucs holds the services shared by the transport (uct) and protocol
// (ucp) layers: status codes, thread modes, memory types and the parsing of
// UCX_* configuration variables.
package ucs

import "strconv"

// Status is a UCS status code. OK and InProgress are not failures; every
// other value is an error. Status implements error, so a wrapped status can be
// matched with errors.Is:
//
//	if errors.Is(err, ucs.ErrNoMemory) { ... }
type Status int8

// The status codes of the UCX API, with the numbering of ucs_status_t.
const (
	OK                    Status = 0
	InProgress            Status = 1
	ErrNoMessage          Status = -1
	ErrNoResource         Status = -2
	ErrIOError            Status = -3
	ErrNoMemory           Status = -4
	ErrInvalidParam       Status = -5
	ErrUnreachable        Status = -6
	ErrInvalidAddr        Status = -7
	ErrNotImplemented     Status = -8
	ErrMessageTruncated   Status = -9
	ErrNoProgress         Status = -10
	ErrBufferTooSmall     Status = -11
	ErrNoElem             Status = -12
	ErrSomeConnectsFailed Status = -13
	ErrNoDevice           Status = -14
	ErrBusy               Status = -15
	ErrCanceled           Status = -16
	ErrShmemSegment       Status = -17
	ErrAlreadyExists      Status = -18
	ErrOutOfRange         Status = -19
	ErrTimedOut           Status = -20
	ErrExceedsLimit       Status = -21
	ErrUnsupported        Status = -22
	ErrRejected           Status = -23
	ErrNotConnected       Status = -24
	ErrConnectionReset    Status = -25

	ErrFirstLinkFailure     Status = -40
	ErrLastLinkFailure      Status = -59
	ErrFirstEndpointFailure Status = -60
	ErrEndpointTimeout      Status = -80
	ErrLastEndpointFailure  Status = -89
	ErrLast                 Status = -100
)

var statusText = map[Status]string{
	OK:                    "Success",
	InProgress:            "Operation in progress",
	ErrNoMessage:          "No pending message",
	ErrNoResource:         "No resources are available to initiate the operation",
	ErrIOError:            "Input/output error",
	ErrNoMemory:           "Out of memory",
	ErrInvalidParam:       "Invalid parameter",
	ErrUnreachable:        "Destination is unreachable",
	ErrInvalidAddr:        "Address not valid",
	ErrNotImplemented:     "Function not implemented",
	ErrMessageTruncated:   "Message truncated",
	ErrNoProgress:         "No progress",
	ErrBufferTooSmall:     "Provided buffer is too small",
	ErrNoElem:             "No such element",
	ErrSomeConnectsFailed: "Failed to connect some of the requested endpoints",
	ErrNoDevice:           "No such device",
	ErrBusy:               "Device is busy",
	ErrCanceled:           "Request canceled",
	ErrShmemSegment:       "Shared memory error",
	ErrAlreadyExists:      "Element already exists",
	ErrOutOfRange:         "Index out of range",
	ErrTimedOut:           "Operation timed out",
	ErrExceedsLimit:       "User-defined limit was reached",
	ErrUnsupported:        "Unsupported operation",
	ErrRejected:           "Operation rejected by remote peer",
	ErrNotConnected:       "Endpoint is not connected",
	ErrConnectionReset:    "Connection reset by remote peer",
	ErrEndpointTimeout:    "Endpoint timeout",
}

// String returns the text that ucs_status_string gives for s.
func (s Status) String() string {
	if t, ok := statusText[s]; ok {
		return t
	}
	switch {
	case s <= ErrFirstLinkFailure && s >= ErrLastLinkFailure:
		return "Link failure"
	case s <= ErrFirstEndpointFailure && s >= ErrLastEndpointFailure:
		return "Endpoint failure"
	}
	return "Unknown error " + strconv.Itoa(int(s))
}

// Error implements error.
func (s Status) Error() string { return s.String() }

// IsErr reports whether s is a failure (neither OK nor InProgress).
func (s Status) IsErr() bool { return s < 0 }

// Err returns nil for OK and s otherwise, so that a status can be returned
// where Go expects an error. InProgress is returned as is: callers that may
// see it must check for it.
func (s Status) Err() error {
	if s == OK {
		return nil
	}
	return s
}
