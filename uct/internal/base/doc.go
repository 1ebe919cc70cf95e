// Package base holds what the transports of goshmem (uct/self, uct/sm,
// uct/cma, uct/tcp) share, so that each transport states only what is its
// own:
//
//   - component.go: the component with a single memory domain (Component)
//     and its MD (MD, RegisterMD, AllocateMD), named by a Transport;
//   - wire.go: the one checked codec of packed keys and addresses (Format):
//     length, magic, version and reserved bits, then the fields and their
//     checks (CheckPid, CheckRange, CheckNonZero);
//   - ids.go: process ids, random ids and address bounds (Pid, RandomID,
//     ValidPid, ValidRange, MaxPid, MaxAddr);
//   - caps.go: the shape of iface attributes (IfaceAttr, SetMemoryOps,
//     OpCaps, AMCaps) and the flag and atomic sets several transports
//     report (RMAFlags, AMFlags, AllAtomics);
//   - am.go: active message handler tables (AMHandlers) and queued messages
//     (AMMsg);
//   - headroom.go: the receive headroom in front of AM data (Headroom:
//     the buffers' layout, and the unsafe way back from data to them);
//   - progress.go: an iface's registration with its worker's progress
//     (ProgressReg, which gives it uct.ProgressController);
//   - epaddr.go: EP addresses, an iface address followed by an EP id
//     (EncodeEPAddr, SplitEPAddr).
//
// It is internal to uct: the transports embed its types and call its
// functions; users see only the promoted methods.
package base
