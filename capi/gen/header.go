package main

import (
	"bytes"
	"fmt"
	"strings"
)

// headerTop is the untyped part of shmem.h: constants, handle types and
// the routines that take no type.
const headerTop = `
#ifndef GOSHMEM_SHMEM_H
#define GOSHMEM_SHMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version (OpenSHMEM 1.6) and vendor. */
#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 6
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define SHMEM_MAX_NAME_LEN 256
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define SHMEM_VENDOR_STRING "goshmem"
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING
#define GOSHMEM 1

/* shmem_global_exit does not return (_Noreturn in C11). */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define GSH_NORETURN _Noreturn
#elif defined(__GNUC__)
#define GSH_NORETURN __attribute__((__noreturn__))
#else
#define GSH_NORETURN
#endif

/* Thread levels. */
#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

/* Comparison operators of the point-to-point synchronization routines. */
#define SHMEM_CMP_EQ 0
#define SHMEM_CMP_NE 1
#define SHMEM_CMP_GT 2
#define SHMEM_CMP_GE 3
#define SHMEM_CMP_LT 4
#define SHMEM_CMP_LE 5
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_GE SHMEM_CMP_GE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_LE SHMEM_CMP_LE

/* Signal operators. */
#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

/* Allocation hints. */
#define SHMEM_MALLOC_ATOMICS_REMOTE 1L
#define SHMEM_MALLOC_SIGNAL_REMOTE 2L

/* Work arrays of the deprecated active-set collectives (in longs). */
#define SHMEM_SYNC_VALUE 0L
#define SHMEM_BARRIER_SYNC_SIZE 4
#define SHMEM_BCAST_SYNC_SIZE 4
#define SHMEM_COLLECT_SYNC_SIZE 4
#define SHMEM_REDUCE_SYNC_SIZE 4
#define SHMEM_ALLTOALL_SYNC_SIZE 4
#define SHMEM_ALLTOALLS_SYNC_SIZE 4
#define SHMEM_SYNC_SIZE 4
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 1
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_ALLTOALL_SYNC_SIZE SHMEM_ALLTOALL_SYNC_SIZE
#define _SHMEM_ALLTOALLS_SYNC_SIZE SHMEM_ALLTOALLS_SYNC_SIZE
#define _SHMEM_SYNC_SIZE SHMEM_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE

/* Contexts: a handle names one; SHMEM_CTX_DEFAULT is the default one. */
typedef struct goshmem_ctx *shmem_ctx_t;
#define SHMEM_CTX_SERIALIZED 1L
#define SHMEM_CTX_PRIVATE 2L
#define SHMEM_CTX_NOSTORE 4L
#define SHMEM_CTX_INVALID ((shmem_ctx_t)0)
#define SHMEM_CTX_DEFAULT ((shmem_ctx_t)1)

/* Sessions. */
#define SHMEM_CTX_SESSION_BATCH 1L
#define SHMEM_CTX_SESSION_TOTAL_OPS 1L
typedef struct {
    size_t total_ops;
} shmem_ctx_session_config_t;

/* Teams: a handle names one; SHMEM_TEAM_WORLD and SHMEM_TEAM_SHARED are the
 * predefined ones. */
typedef struct goshmem_team *shmem_team_t;
#define SHMEM_TEAM_INVALID ((shmem_team_t)0)
#define SHMEM_TEAM_WORLD ((shmem_team_t)1)
#define SHMEM_TEAM_SHARED ((shmem_team_t)2)
#define SHMEM_TEAM_NUM_CONTEXTS 1L
typedef struct {
    int num_contexts;
} shmem_team_config_t;

/* Library setup, exit and query. */
void shmem_init(void);
int shmem_init_thread(int requested, int *provided);
void shmem_query_thread(int *provided);
void shmem_finalize(void);
GSH_NORETURN void shmem_global_exit(int status);
void shmem_query_initialized(int *initialized);
int shmem_my_pe(void);
int shmem_n_pes(void);
int shmem_pe_accessible(int pe);
int shmem_addr_accessible(const void *addr, int pe);
void *shmem_ptr(const void *dest, int pe);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);
void shmem_pcontrol(int level, ...);

/* Memory management. */
void *shmem_malloc(size_t size);
void *shmem_calloc(size_t count, size_t size);
void *shmem_align(size_t alignment, size_t size);
void *shmem_realloc(void *ptr, size_t size);
void shmem_free(void *ptr);
void *shmem_malloc_with_hints(size_t size, long hints);

/* Teams. */
int shmem_team_my_pe(shmem_team_t team);
int shmem_team_n_pes(shmem_team_t team);
int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t *config);
int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team);
int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size, const shmem_team_config_t *config, long config_mask, shmem_team_t *new_team);
int shmem_team_split_2d(shmem_team_t parent_team, int xrange, const shmem_team_config_t *xaxis_config, long xaxis_mask, shmem_team_t *xaxis_team, const shmem_team_config_t *yaxis_config, long yaxis_mask, shmem_team_t *yaxis_team);
void *shmem_team_ptr(shmem_team_t team, const void *dest, int pe);
void shmem_team_destroy(shmem_team_t team);

/* Contexts. */
int shmem_ctx_create(long options, shmem_ctx_t *ctx);
int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t *ctx);
void shmem_ctx_destroy(shmem_ctx_t ctx);
int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t *team);
void shmem_ctx_session_start(shmem_ctx_t ctx, long options, const shmem_ctx_session_config_t *config, long config_mask);
void shmem_ctx_session_stop(shmem_ctx_t ctx);

/* Untyped RMA. */
void shmem_putmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_putmem(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_getmem(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_putmem_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_getmem_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_putmem_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_putmem_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_putmem_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);

/* Signals. */
uint64_t shmem_signal_fetch(const uint64_t *sig_addr);
uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);
void shmem_signal_add(uint64_t *sig_addr, uint64_t signal, int pe);
void shmem_ctx_signal_add(shmem_ctx_t ctx, uint64_t *sig_addr, uint64_t signal, int pe);
void shmem_signal_set(uint64_t *sig_addr, uint64_t signal, int pe);
void shmem_ctx_signal_set(shmem_ctx_t ctx, uint64_t *sig_addr, uint64_t signal, int pe);

/* Collectives over teams, untyped. */
void shmem_barrier_all(void);
void shmem_sync_all(void);
int shmem_team_sync(shmem_team_t team);
int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems, int PE_root);
int shmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallsmem(shmem_team_t team, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);

/* Ordering and completion. */
void shmem_fence(void);
void shmem_ctx_fence(shmem_ctx_t ctx);
void shmem_quiet(void);
void shmem_ctx_quiet(shmem_ctx_t ctx);
void shmem_pe_quiet(const int *target_pes, size_t npes);
void shmem_ctx_pe_quiet(shmem_ctx_t ctx, const int *target_pes, size_t npes);

/* Distributed locks. */
void shmem_set_lock(long *lock);
void shmem_clear_lock(long *lock);
int shmem_test_lock(long *lock);

/* Deprecated routines that programs still call. */
void start_pes(int npes);
int _my_pe(void);
int _num_pes(void);
void *shmalloc(size_t size);
void shfree(void *ptr);
void *shrealloc(void *ptr, size_t size);
void *shmemalign(size_t alignment, size_t size);
void shmem_wait(long *ivar, long cmp_value);
void shmem_wait_until(long *ivar, int cmp, long cmp_value);
void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_sync(int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_broadcast32(void *dest, const void *source, size_t nelems, int PE_root, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_broadcast64(void *dest, const void *source, size_t nelems, int PE_root, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_collect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_collect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_fcollect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_fcollect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoall32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoall64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoalls32(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoalls64(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_clear_cache_inv(void);
void shmem_set_cache_inv(void);
void shmem_clear_cache_line_inv(void *dest);
void shmem_set_cache_line_inv(void *dest);
void shmem_udcflush(void);
void shmem_udcflush_line(void *dest);
`

// genericTop opens the C11 generic part of shmem.h: the helpers that
// count the arguments, for the routines that take a context or not.
const genericTop = `
/* C11 generic forms: shmem_NAME(...) calls shmem_TYPE_NAME (or
 * shmem_ctx_TYPE_NAME when a context comes first) for the type of its
 * symmetric argument. */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__cplusplus) && !defined(GOSHMEM_NO_GENERICS)
#define GSH_NARG(...) GSH_NARG_(__VA_ARGS__, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define GSH_NARG_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, n, ...) n
#define GSH_CAT(a, b) GSH_CAT_(a, b)
#define GSH_CAT_(a, b) a##b
/* The C11 forms of the untyped routines: with a context first, or a team
 * (shmem_sync), beside their C forms. */
#define shmem_signal_add(...) GSH_CAT(gsh_generic_signal_add_, GSH_NARG(__VA_ARGS__))(__VA_ARGS__)
#define gsh_generic_signal_add_3(a0, a1, a2) (shmem_signal_add)(a0, a1, a2)
#define gsh_generic_signal_add_4(c, a0, a1, a2) shmem_ctx_signal_add(c, a0, a1, a2)
#define shmem_signal_set(...) GSH_CAT(gsh_generic_signal_set_, GSH_NARG(__VA_ARGS__))(__VA_ARGS__)
#define gsh_generic_signal_set_3(a0, a1, a2) (shmem_signal_set)(a0, a1, a2)
#define gsh_generic_signal_set_4(c, a0, a1, a2) shmem_ctx_signal_set(c, a0, a1, a2)
#define shmem_sync(...) GSH_CAT(gsh_generic_sync_, GSH_NARG(__VA_ARGS__))(__VA_ARGS__)
#define gsh_generic_sync_1(team) shmem_team_sync(team)
#define gsh_generic_sync_4(a0, a1, a2, a3) (shmem_sync)(a0, a1, a2, a3)
`

const headerEnd = `#endif /* C11 generics */

#ifdef __cplusplus
}
#endif

#include <shmemx.h>

#endif /* GOSHMEM_SHMEM_H */
`

// shmemx is shmemx.h: goshmem's extensions.
const shmemx = `/* shmemx.h: goshmem's extensions to OpenSHMEM 1.6. ` + banner + ` */
#ifndef GOSHMEM_SHMEMX_H
#define GOSHMEM_SHMEMX_H

#include <shmem.h>

#ifdef __cplusplus
extern "C" {
#endif

/* shmemx_heap_bounds stores where this PE's symmetric heap starts and its
 * size in bytes (NULL and 0 before shmem_init). */
void shmemx_heap_bounds(void **base, size_t *size);

/* shmemx_data_bounds stores where the program's static data (its
 * writable data and bss, symmetric in goshmem) starts and its size in
 * bytes; NULL and 0 where it could not be made symmetric. */
void shmemx_data_bounds(void **base, size_t *size);

#ifdef __cplusplus
}
#endif

/* The names Sandia OpenSHMEM's shmemx.h gave routines that OpenSHMEM 1.6
 * made standard (strided block transfers, scans, signal_add and
 * signal_set), and its SHMEMX_TEAM_NODE, the PEs of this node, which
 * SHMEM_TEAM_SHARED is here. */
#define SHMEMX_TEAM_NODE SHMEM_TEAM_SHARED
@renamed@
#endif /* GOSHMEM_SHMEMX_H */
`

// untypedProtos are the prototypes of headerTop: its lines that declare a
// routine, read back so that they are written once.
func untypedProtos() []proto {
	var ps []proto
	for _, l := range strings.Split(headerTop, "\n") {
		if l == "" || l[0] == '#' || l[0] == ' ' || l[0] == '/' || l[0] == '}' || !strings.HasSuffix(l, ");") {
			continue
		}
		open := strings.IndexByte(l, '(')
		head := strings.TrimPrefix(l[:open], "GSH_NORETURN ")
		name := head[strings.LastIndexAny(head, " *")+1:]
		ret := strings.TrimSpace(head[:len(head)-len(name)])
		if strings.HasPrefix(l, "GSH_NORETURN ") {
			ret = "GSH_NORETURN " + ret
		}
		ps = append(ps, proto{ret, name, l[open+1 : len(l)-2]})
	}
	return ps
}

// pshmemHeader is pshmem.h, the profiling interface of OpenSHMEM 1.6:
// every routine of shmem.h (untyped and typed) under its name with p in
// front, pshmem_NAME for shmem_NAME (pstart_pes, pshmalloc, ... for the
// deprecated names without shmem_).
func pshmemHeader() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "/* pshmem.h: the profiling interface of OpenSHMEM 1.6 on goshmem. %s */\n", banner)
	b.WriteString(pshmemTop)
	for _, p := range append(untypedProtos(), typedProtos()...) {
		p.name = "p" + p.name
		fmt.Fprintln(&b, p)
	}
	b.WriteString(pshmemEnd)
	return b.Bytes()
}

const pshmemTop = `
/* Every routine of shmem.h is also pshmem_NAME (p before the deprecated
 * names without shmem_: pstart_pes, p_my_pe, pshmalloc, ...). The library
 * defines the pshmem_ names, and the shmem_ names as weak aliases of them
 * (weak functions calling them, for the few Go defines), so that a
 * program or tool may define its own shmem_NAME, with the shared library
 * or the static one, and reach the library's through pshmem_NAME. The
 * library's own calls go to the pshmem_ names, not through the replaceable
 * ones. The C11 generic forms have no pshmem_ form: call the typed
 * routine's. */
#ifndef GOSHMEM_PSHMEM_H
#define GOSHMEM_PSHMEM_H

#include <shmem.h>

#ifdef __cplusplus
extern "C" {
#endif

`

const pshmemEnd = `
#ifdef __cplusplus
}
#endif

#endif /* GOSHMEM_PSHMEM_H */
`
