// Package base holds what the transports of goshmem (uct/self, uct/sm,
// uct/cma, uct/tcp) share: the glue of a component with a single memory
// domain (Component, MD), the checked codec of packed keys and addresses
// (Format), the ids and bounds that keys carry (RandomID, Pid, ValidPid,
// ValidRange), the shared-memory domain of the process (DomainAddress) and
// the capability values that several transports report (CPUAtomicOps,
// CPUAtomicFops, ZcopyCaps).
//
// It is internal to uct: the transports embed its types and call its
// functions, users see only the promoted methods.
package base
