/* gsh.h: the internals of goshmem's C library: the tables Go fills at
 * init, the hot paths that use them without calling into Go, and the
 * macro families that ztyped.c (generated from the type table) expands
 * into the typed routines. */
#ifndef GOSHMEM_GSH_H
#define GOSHMEM_GSH_H

#define GOSHMEM_NO_GENERICS 1
#include <shmem.h>
#include <shmemx.h>
#include <pshmem.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The profiling interface (OpenSHMEM 1.6, section 11): the library defines
 * every routine as pshmem_NAME, and shmem_NAME is a weak alias of it
 * (GSH_WEAK, in the translation unit of the definition, as an alias must
 * be), so that a program's own shmem_NAME replaces it at link time, with
 * the static library as with the shared one, and can call pshmem_NAME.
 * The library calls only pshmem_ names and its internal functions itself,
 * so a program's wrapper sees the program's calls and no others. */
#define GSH_WEAK(name) extern __typeof__(name) name __attribute__((weak, alias("p" #name)));
/* GSH_FN is, in a pshmem_ routine, the name the program knows it by for
 * the library's messages: its shmem_ name (__func__ after the p). */
#define GSH_FN (__func__ + 1)

#define GSH_LIKELY(x) __builtin_expect(!!(x), 1)
#define GSH_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* The tables: written by Go at init (and, per PE, on first use of the PE),
 * read by the hot paths. gsh_heap_peer[pe] is PE pe's symmetric heap
 * mapped into this process (NULL when only the transports reach it);
 * gsh_data_peer[pe] is PE pe's static data mapped here (NULL when only the
 * transports reach it: it is mapped where the heap is). */
extern int gsh_npes, gsh_me;
extern uintptr_t gsh_heap_lo, gsh_heap_size, gsh_data_lo, gsh_data_size;
extern char **gsh_heap_peer, **gsh_data_peer;
/* gsh_static_words is this PE's words that the library keeps for itself
 * (GSH_STATIC_WORDS of them, on a page of their own), a symmetric region
 * after the program's static data (every transport reaches it): the team
 * collectives on static data publish their arguments there for the other
 * PEs. */
#define GSH_STATIC_WORDS 8
extern uint64_t *gsh_static_words;
extern unsigned char *gsh_checked;

/* gsh_wsync is the world team's barrier, when Go lends it
 * (internal/worldsync: a dissemination over heaps this PE maps, Go not
 * profiling): on is set, and the rest is Go's layout of its words (the
 * barrier number, the collective word, and each round's counter line of
 * this PE and of the PE it signals), which shmem_barrier_all and
 * shmem_sync_all then use without calling into Go. */
struct gsh_wsync {
    int on, rounds, spin;
    uint64_t *number, *collword;
    uint64_t kind_barrier_all, kind_sync_all;
    uint64_t **own, **peer;
};
extern struct gsh_wsync gsh_wsync;
void gsh_wsync_init(int rounds, int spin, uint64_t *number, uint64_t *collword, uint64_t kind_barrier_all, uint64_t kind_sync_all);
void gsh_wsync_round(int k, uint64_t *own, uint64_t *peer);
void gsh_wsync_free(void);

/* Go's side (capi.go), called on the slow paths only. Those that take fn,
 * the routine the program called, end the job with a one-line message
 * naming it when package shmem rejects an argument. */
extern int goshmem_go_init(int requested, int *provided);
extern void goshmem_go_finalize(void);
extern void goshmem_go_progress(void);
extern void goshmem_go_connect(int pe);
extern int goshmem_go_addr_accessible(void *p, int pe);
extern void goshmem_go_rma(uintptr_t ctx, int kind, void *dest, void *source, size_t nbytes, int pe, const char *fn);
extern void goshmem_go_strided(uintptr_t ctx, int get, void *dest, void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int esize, int pe, const char *fn);
extern void goshmem_go_put_signal(uintptr_t ctx, void *dest, void *source, size_t nbytes, uint64_t *sig, uint64_t signal, int op, int nbi, int pe, const char *fn);
extern uint64_t goshmem_go_amo(uintptr_t ctx, int op, void *dest, uint64_t value, uint64_t cond, int size, int pe, const char *fn);
extern void goshmem_go_amo_nbi(uintptr_t ctx, int op, void *fetch, void *dest, uint64_t value, uint64_t cond, int size, int pe, const char *fn);
extern int goshmem_go_reduce(uintptr_t team, int op, int ty, void *dest, void *source, size_t n, const char *fn);
extern int goshmem_go_coll(uintptr_t team, int kind, void *dest, void *source, size_t nbytes, ptrdiff_t a, ptrdiff_t b, int esize, const char *fn);
extern void goshmem_go_quiet(uintptr_t ctx, const char *fn);
extern int goshmem_go_ctx_create(uintptr_t team, long options, uintptr_t *ctx, const char *fn);
extern void goshmem_go_ctx_destroy(uintptr_t ctx, const char *fn);
extern int goshmem_go_ctx_get_team(uintptr_t ctx, uintptr_t *team);
extern void goshmem_go_session_start(uintptr_t ctx, long options, const shmem_ctx_session_config_t *config, long mask, const char *fn);
extern void goshmem_go_session_stop(uintptr_t ctx, const char *fn);
__attribute__((noreturn, cold)) void gsh_fatal_go(const char *fn, const char *msg);
extern void goshmem_go_global_exit(int status);
extern void goshmem_go_pcontrol(int level);
extern void goshmem_go_barrier_all(void);
extern void goshmem_go_sync_all(void);
extern void goshmem_go_world_wait(uint64_t *p, uint64_t v);
extern void goshmem_go_world_mismatch(int sync);

/* A context made by shmem_ctx_create or shmem_team_create_ctx:
 * shmem_ctx_t points to one (SHMEM_CTX_DEFAULT and SHMEM_CTX_INVALID are
 * the small constants). PE numbers on it are numbers in its team: world
 * maps them to world PE numbers (NULL for a context of the world team). A
 * destroyed context stays allocated, not live, so that its use is
 * reported rather than read from freed memory. */
struct goshmem_ctx {
    uintptr_t h; /* Go's handle */
    int npes;    /* PEs in its team */
    int live;
    int *world;
};

enum { GSH_RMA_PUT, GSH_RMA_GET, GSH_RMA_PUT_NBI, GSH_RMA_GET_NBI };
enum { GSH_COLL_BROADCAST, GSH_COLL_COLLECT, GSH_COLL_FCOLLECT, GSH_COLL_ALLTOALL, GSH_COLL_ALLTOALLS };
/* Atomic operations, in the order of the generator's amoOps. */
enum {
    GSH_AMO_FETCH, GSH_AMO_SET, GSH_AMO_SWAP, GSH_AMO_COMPARE_SWAP, GSH_AMO_FETCH_INC, GSH_AMO_INC,
    GSH_AMO_FETCH_ADD, GSH_AMO_ADD, GSH_AMO_FETCH_AND, GSH_AMO_AND, GSH_AMO_FETCH_OR, GSH_AMO_OR,
    GSH_AMO_FETCH_XOR, GSH_AMO_XOR
};

/* gsh_go_pending is set when an operation went through Go, which may
 * leave it in flight: quiet and fence then call Go too; otherwise every
 * operation was a store or an atomic on mapped memory and a CPU fence is
 * all they need. */
extern int gsh_go_pending;

/* gsh_net_peers is set at init where some PE is reached through the
 * network: the waits on local memory then drive Go's progress (gsh_wait_pause),
 * so that what they wait for moves at once, not after tcp's passive delay. */
extern int gsh_net_peers;

__attribute__((noreturn, cold, format(printf, 2, 3))) void gsh_fatal(const char *fn, const char *fmt, ...);
__attribute__((noreturn, cold)) void gsh_bad_pe(const char *fn, int pe);
int gsh_ctx_pe(shmem_ctx_t ctx, int pe, const char *fn);
__attribute__((noreturn, cold)) void gsh_misaligned(const char *fn, const void *p, int size);
char *gsh_connect(const void *p, size_t n, int pe, const char *fn);
void gsh_wait_pause(unsigned *n);

/* gsh_relax is a spinning loop's pause: it lets the CPU know the loop
 * spins, which spares it the pipeline flush of many loads in flight when
 * the line they read changes (about half of a 2-PE barrier on this
 * project's EPYC VMs). */
static inline void gsh_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline void gsh_check_pe(const char *fn, int pe) {
    if (GSH_UNLIKELY((unsigned)pe >= (unsigned)gsh_npes)) gsh_bad_pe(fn, pe);
}

/* gsh_pe checks pe, a PE number on ctx, and returns its world number. */
static inline int gsh_pe(shmem_ctx_t ctx, int pe, const char *fn) {
    if (GSH_LIKELY(ctx == SHMEM_CTX_DEFAULT)) {
        gsh_check_pe(fn, pe);
        return pe;
    }
    return gsh_ctx_pe(ctx, pe, fn);
}

/* gsh_h is Go's handle of ctx. */
static inline uintptr_t gsh_h(shmem_ctx_t ctx) {
    if (ctx == SHMEM_CTX_DEFAULT || ctx == SHMEM_CTX_INVALID) return (uintptr_t)ctx;
    return ctx->h;
}

/* gsh_addr returns where the symmetric object of n bytes at p lives on pe,
 * mapped here, or NULL when it is not mapped (yet). */
static inline char *gsh_addr(const void *p, size_t n, int pe) {
    uintptr_t off = (uintptr_t)p - gsh_heap_lo;
    if (GSH_LIKELY(off < gsh_heap_size && n <= gsh_heap_size - off)) {
        char *b = gsh_heap_peer[pe];
        return b ? b + off : NULL;
    }
    off = (uintptr_t)p - gsh_data_lo;
    if (off < gsh_data_size && n <= gsh_data_size - off) {
        char *b = gsh_data_peer[pe];
        return b ? b + off : NULL;
    }
    return NULL;
}

/* gsh_map is gsh_addr connecting pe (a checked world PE number) on its
 * first use. */
static inline char *gsh_map(const void *p, size_t n, int pe, const char *fn) {
    char *a = gsh_addr(p, n, pe);
    if (GSH_LIKELY(a != NULL)) return a;
    return gsh_connect(p, n, pe, fn);
}

/* gsh_copy copies n bytes to or from a peer's mapped memory. From
 * GSH_REP_MIN bytes on, where the CPU has enhanced REP MOVSB (gsh_erms,
 * set at init), it copies with REP MOVSB: between two processes' mappings
 * it took 19.6 us for 1 MiB where glibc's memcpy took 24 (package ucs's
 * Memcpy, which the Go side uses, measured the same); below, memcpy. */
#define GSH_REP_MIN (32 << 10)
extern int gsh_erms;
static inline void gsh_copy(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
    if (n >= GSH_REP_MIN && gsh_erms) {
        __asm__ __volatile__("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
        return;
    }
#endif
    memcpy(dst, src, n);
}

static inline void gsh_put(shmem_ctx_t ctx, void *dest, const void *source, size_t n, int pe, int nbi, const char *fn) {
    char *a = gsh_map(dest, n, gsh_pe(ctx, pe, fn), fn);
    if (GSH_LIKELY(a != NULL)) {
        gsh_copy(a, source, n);
        return;
    }
    gsh_go_pending = 1;
    goshmem_go_rma(gsh_h(ctx), nbi ? GSH_RMA_PUT_NBI : GSH_RMA_PUT, dest, (void *)source, n, pe, fn);
}

static inline void gsh_get(shmem_ctx_t ctx, void *dest, const void *source, size_t n, int pe, int nbi, const char *fn) {
    char *a = gsh_map(source, n, gsh_pe(ctx, pe, fn), fn);
    if (GSH_LIKELY(a != NULL)) {
        gsh_copy(dest, a, n);
        return;
    }
    if (nbi) gsh_go_pending = 1;
    goshmem_go_rma(gsh_h(ctx), nbi ? GSH_RMA_GET_NBI : GSH_RMA_GET, dest, (void *)source, n, pe, fn);
}

/* Strided: bsize elements of esize bytes per block, nblocks blocks; the
 * strides are in elements, between blocks, at least bsize (1 for
 * iput/iget, which are bsize 1). */
static inline void gsh_strided(shmem_ctx_t ctx, int get, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst,
                               size_t bsize, size_t nblocks, size_t esize, int pe, const char *fn) {
    if (nblocks == 0 || bsize == 0) return;
    if (GSH_UNLIKELY(dst < (ptrdiff_t)bsize || sst < (ptrdiff_t)bsize))
        gsh_fatal(fn, "%s stride %td (valid: %zu or more)", dst < (ptrdiff_t)bsize ? "dst" : "sst",
                  dst < (ptrdiff_t)bsize ? dst : sst, bsize);
    const void *remote = get ? source : dest;
    size_t span = ((nblocks - 1) * (size_t)(get ? sst : dst) + bsize) * esize;
    char *a = gsh_map(remote, span, gsh_pe(ctx, pe, fn), fn);
    if (a != NULL) {
        char *d = get ? (char *)dest : a;
        const char *s = get ? a : (const char *)source;
        for (size_t i = 0; i < nblocks; i++)
            memcpy(d + (size_t)dst * i * esize, s + (size_t)sst * i * esize, bsize * esize);
        return;
    }
    if (!get) gsh_go_pending = 1;
    goshmem_go_strided(gsh_h(ctx), get, dest, (void *)source, dst, sst, bsize, nblocks, (int)esize, pe, fn);
}

static inline void gsh_signal_local(uint64_t *s, uint64_t signal, int op) {
    if (op == SHMEM_SIGNAL_ADD)
        __atomic_fetch_add(s, signal, __ATOMIC_RELEASE);
    else
        __atomic_store_n(s, signal, __ATOMIC_RELEASE);
}

static inline void gsh_put_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t n, uint64_t *sig, uint64_t signal,
                                  int op, int pe, int nbi, const char *fn) {
    if (GSH_UNLIKELY(op != SHMEM_SIGNAL_SET && op != SHMEM_SIGNAL_ADD)) gsh_fatal(fn, "sig_op %d is neither SHMEM_SIGNAL_SET nor SHMEM_SIGNAL_ADD", op);
    int w = gsh_pe(ctx, pe, fn);
    char *a = gsh_map(dest, n, w, fn);
    char *s = gsh_map(sig, 8, w, fn);
    if (GSH_LIKELY(a != NULL && s != NULL)) {
        memcpy(a, source, n);
        gsh_signal_local((uint64_t *)s, signal, op);
        return;
    }
    gsh_go_pending = 1;
    if (a == NULL && s == NULL) {
        goshmem_go_put_signal(gsh_h(ctx), dest, (void *)source, n, sig, signal, op, nbi, pe, fn);
        return;
    }
    /* One mapped and one not (static data is mapped on the host, the heap
     * reached through a transport): the data is complete before the
     * signal goes. */
    if (a != NULL) {
        memcpy(a, source, n);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        goshmem_go_amo(gsh_h(ctx), op == SHMEM_SIGNAL_ADD ? GSH_AMO_ADD : GSH_AMO_SET, sig, signal, 0, 8, pe, fn);
        return;
    }
    goshmem_go_rma(gsh_h(ctx), GSH_RMA_PUT, dest, (void *)source, n, pe, fn);
    goshmem_go_quiet(gsh_h(ctx), fn);
    gsh_signal_local((uint64_t *)s, signal, op);
}

#define GSH_AMO_LOCAL(B)                                                                              \
    static inline uint##B##_t gsh_amo_local##B(int op, uint##B##_t *a, uint##B##_t v, uint##B##_t c) { \
        switch (op) {                                                                                  \
        case GSH_AMO_FETCH: return __atomic_load_n(a, __ATOMIC_ACQUIRE);                               \
        case GSH_AMO_SET: __atomic_store_n(a, v, __ATOMIC_RELEASE); return 0;                          \
        case GSH_AMO_SWAP: return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                         \
        case GSH_AMO_COMPARE_SWAP:                                                                     \
            __atomic_compare_exchange_n(a, &c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);              \
            return c;                                                                                  \
        case GSH_AMO_FETCH_INC: case GSH_AMO_INC: return __atomic_fetch_add(a, 1, __ATOMIC_SEQ_CST);   \
        case GSH_AMO_FETCH_ADD: case GSH_AMO_ADD: return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);   \
        case GSH_AMO_FETCH_AND: case GSH_AMO_AND: return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);   \
        case GSH_AMO_FETCH_OR: case GSH_AMO_OR: return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);      \
        case GSH_AMO_FETCH_XOR: case GSH_AMO_XOR: return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);   \
        }                                                                                              \
        return 0;                                                                                      \
    }                                                                                                  \
    static inline uint##B##_t gsh_amo##B(shmem_ctx_t ctx, int op, void *dest, uint##B##_t v, uint##B##_t c, int pe, const char *fn) { \
        if (GSH_UNLIKELY((uintptr_t)dest % (B / 8) != 0)) gsh_misaligned(fn, dest, B / 8);            \
        char *a = gsh_map(dest, B / 8, gsh_pe(ctx, pe, fn), fn);                                       \
        if (GSH_LIKELY(a != NULL)) return gsh_amo_local##B(op, (uint##B##_t *)a, v, c);                \
        if (op == GSH_AMO_SET || op == GSH_AMO_INC || op == GSH_AMO_ADD || op == GSH_AMO_AND ||        \
            op == GSH_AMO_OR || op == GSH_AMO_XOR)                                                     \
            gsh_go_pending = 1;                                                                        \
        return (uint##B##_t)goshmem_go_amo(gsh_h(ctx), op, dest, v, c, B / 8, pe, fn);                 \
    }                                                                                                  \
    static inline void gsh_amo_nbi##B(shmem_ctx_t ctx, int op, void *fetch, void *dest, uint##B##_t v, uint##B##_t c, int pe, const char *fn) { \
        if (GSH_UNLIKELY((uintptr_t)dest % (B / 8) != 0)) gsh_misaligned(fn, dest, B / 8);            \
        char *a = gsh_map(dest, B / 8, gsh_pe(ctx, pe, fn), fn);                                       \
        if (GSH_LIKELY(a != NULL)) {                                                                   \
            *(uint##B##_t *)fetch = gsh_amo_local##B(op, (uint##B##_t *)a, v, c);                      \
            return;                                                                                    \
        }                                                                                              \
        gsh_go_pending = 1;                                                                            \
        goshmem_go_amo_nbi(gsh_h(ctx), op, fetch, dest, v, c, B / 8, pe, fn);                          \
    }
GSH_AMO_LOCAL(32)
GSH_AMO_LOCAL(64)

#define GSH_STRIP(...) __VA_ARGS__
/* GSH_BOTH defines a routine's context form and its default form, both
 * inlining body, which sees ctx and fn (the name of the routine the
 * program called, for its messages); GSH_BOTHV is GSH_BOTH for the
 * routines returning nothing. */
#define GSH_BOTH(ret, name, params, args, body)                                                     \
    static inline ret gsh_##name(shmem_ctx_t ctx, const char *fn, GSH_STRIP params) body            \
    GSH_WEAK(shmem_ctx_##name) ret pshmem_ctx_##name(shmem_ctx_t ctx, GSH_STRIP params) { return gsh_##name(ctx, "shmem_ctx_" #name, GSH_STRIP args); } \
    GSH_WEAK(shmem_##name) ret pshmem_##name(GSH_STRIP params) { return gsh_##name(SHMEM_CTX_DEFAULT, "shmem_" #name, GSH_STRIP args); }
#define GSH_BOTHV(name, params, args, body)                                                         \
    static inline void gsh_##name(shmem_ctx_t ctx, const char *fn, GSH_STRIP params) body           \
    GSH_WEAK(shmem_ctx_##name) void pshmem_ctx_##name(shmem_ctx_t ctx, GSH_STRIP params) { gsh_##name(ctx, "shmem_ctx_" #name, GSH_STRIP args); } \
    GSH_WEAK(shmem_##name) void pshmem_##name(GSH_STRIP params) { gsh_##name(SHMEM_CTX_DEFAULT, "shmem_" #name, GSH_STRIP args); }

#define GSH_BITS(N, T, B)                                                                           \
    static inline uint##B##_t gsh_bits_##N(T v) { union { T t; uint##B##_t u; } x; x.u = 0; x.t = v; return x.u; } \
    static inline T gsh_val_##N(uint##B##_t u) { union { T t; uint##B##_t u; } x; x.u = u; return x.t; }

#define GSH_RMA_FAMILY(N, T, E)                                                                     \
    GSH_BOTHV(N##_put, (T *dest, const T *source, size_t nelems, int pe), (dest, source, nelems, pe), \
              { gsh_put(ctx, dest, source, nelems * E, pe, 0, fn); })                        \
    GSH_BOTHV(N##_get, (T *dest, const T *source, size_t nelems, int pe), (dest, source, nelems, pe), \
              { gsh_get(ctx, dest, source, nelems * E, pe, 0, fn); })                        \
    GSH_BOTHV(N##_put_nbi, (T *dest, const T *source, size_t nelems, int pe), (dest, source, nelems, pe), \
              { gsh_put(ctx, dest, source, nelems * E, pe, 1, fn); })                        \
    GSH_BOTHV(N##_get_nbi, (T *dest, const T *source, size_t nelems, int pe), (dest, source, nelems, pe), \
              { gsh_get(ctx, dest, source, nelems * E, pe, 1, fn); })                        \
    GSH_BOTHV(N##_iput, (T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe), \
              (dest, source, dst, sst, nelems, pe),                                                \
              { gsh_strided(ctx, 0, dest, source, dst, sst, 1, nelems, E, pe, fn); })         \
    GSH_BOTHV(N##_iget, (T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe), \
              (dest, source, dst, sst, nelems, pe),                                                \
              { gsh_strided(ctx, 1, dest, source, dst, sst, 1, nelems, E, pe, fn); })         \
    GSH_BOTHV(N##_ibput, (T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe), \
              (dest, source, dst, sst, bsize, nblocks, pe),                                        \
              { gsh_strided(ctx, 0, dest, source, dst, sst, bsize, nblocks, E, pe, fn); })    \
    GSH_BOTHV(N##_ibget, (T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe), \
              (dest, source, dst, sst, bsize, nblocks, pe),                                        \
              { gsh_strided(ctx, 1, dest, source, dst, sst, bsize, nblocks, E, pe, fn); })

/* The typed RMA routines of type T (shmem_N_put, ...). */
#define GSH_RMA(N, T)                                                                               \
    GSH_RMA_FAMILY(N, T, sizeof(T))                                                                 \
    GSH_BOTHV(N##_put_signal, (T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe), \
              (dest, source, nelems, sig_addr, signal, sig_op, pe),                                \
              { gsh_put_signal(ctx, dest, source, nelems * sizeof(T), sig_addr, signal, sig_op, pe, 0, fn); }) \
    GSH_BOTHV(N##_put_signal_nbi, (T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe), \
              (dest, source, nelems, sig_addr, signal, sig_op, pe),                                \
              { gsh_put_signal(ctx, dest, source, nelems * sizeof(T), sig_addr, signal, sig_op, pe, 1, fn); }) \
    GSH_BOTHV(N##_p, (T *dest, T value, int pe), (dest, value, pe), {                               \
        char *a = gsh_map(dest, sizeof(T), gsh_pe(ctx, pe, fn), fn);                                \
        if (GSH_LIKELY(a != NULL)) { memcpy(a, &value, sizeof(T)); return; }                        \
        gsh_go_pending = 1;                                                                         \
        goshmem_go_rma(gsh_h(ctx), GSH_RMA_PUT, dest, &value, sizeof(T), pe, fn);                   \
    })                                                                                              \
    GSH_BOTH(T, N##_g, (const T *source, int pe), (source, pe), {                                   \
        T v;                                                                                        \
        gsh_get(ctx, &v, source, sizeof(T), pe, 0, fn);                                       \
        return v;                                                                                   \
    })

/* The sized RMA routines (shmem_put32, ...): typeless, B bits per element. */
#define GSH_RMA_SIZED(B)                                                                            \
    GSH_BOTHV(put##B, (void *dest, const void *source, size_t nelems, int pe), (dest, source, nelems, pe), \
              { gsh_put(ctx, dest, source, nelems * (B / 8), pe, 0, fn); })                  \
    GSH_BOTHV(get##B, (void *dest, const void *source, size_t nelems, int pe), (dest, source, nelems, pe), \
              { gsh_get(ctx, dest, source, nelems * (B / 8), pe, 0, fn); })                  \
    GSH_BOTHV(put##B##_nbi, (void *dest, const void *source, size_t nelems, int pe), (dest, source, nelems, pe), \
              { gsh_put(ctx, dest, source, nelems * (B / 8), pe, 1, fn); })                  \
    GSH_BOTHV(get##B##_nbi, (void *dest, const void *source, size_t nelems, int pe), (dest, source, nelems, pe), \
              { gsh_get(ctx, dest, source, nelems * (B / 8), pe, 1, fn); })                  \
    GSH_BOTHV(iput##B, (void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe), \
              (dest, source, dst, sst, nelems, pe),                                                \
              { gsh_strided(ctx, 0, dest, source, dst, sst, 1, nelems, B / 8, pe, fn); })     \
    GSH_BOTHV(iget##B, (void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe), \
              (dest, source, dst, sst, nelems, pe),                                                \
              { gsh_strided(ctx, 1, dest, source, dst, sst, 1, nelems, B / 8, pe, fn); })     \
    GSH_BOTHV(ibput##B, (void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe), \
              (dest, source, dst, sst, bsize, nblocks, pe),                                        \
              { gsh_strided(ctx, 0, dest, source, dst, sst, bsize, nblocks, B / 8, pe, fn); }) \
    GSH_BOTHV(ibget##B, (void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe), \
              (dest, source, dst, sst, bsize, nblocks, pe),                                        \
              { gsh_strided(ctx, 1, dest, source, dst, sst, bsize, nblocks, B / 8, pe, fn); }) \
    GSH_BOTHV(put##B##_signal, (void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe), \
              (dest, source, nelems, sig_addr, signal, sig_op, pe),                                \
              { gsh_put_signal(ctx, dest, source, nelems * (B / 8), sig_addr, signal, sig_op, pe, 0, fn); }) \
    GSH_BOTHV(put##B##_signal_nbi, (void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe), \
              (dest, source, nelems, sig_addr, signal, sig_op, pe),                                \
              { gsh_put_signal(ctx, dest, source, nelems * (B / 8), sig_addr, signal, sig_op, pe, 1, fn); })

/* Atomics of type T (B bits). */
#define GSH_AMO_FETCH(N, T, B)                                                                      \
    GSH_BOTH(T, N##_atomic_fetch, (const T *source, int pe), (source, pe),                          \
             { return gsh_val_##N(gsh_amo##B(ctx, GSH_AMO_FETCH, (void *)source, 0, 0, pe, fn)); }) \
    GSH_BOTHV(N##_atomic_fetch_nbi, (T *fetch, const T *source, int pe), (fetch, source, pe),       \
              { gsh_amo_nbi##B(ctx, GSH_AMO_FETCH, fetch, (void *)source, 0, 0, pe, fn); })
#define GSH_AMO_SET(N, T, B)                                                                        \
    GSH_BOTHV(N##_atomic_set, (T *dest, T value, int pe), (dest, value, pe),                        \
              { gsh_amo##B(ctx, GSH_AMO_SET, dest, gsh_bits_##N(value), 0, pe, fn); })
#define GSH_AMO_SWAP(N, T, B)                                                                       \
    GSH_BOTH(T, N##_atomic_swap, (T *dest, T value, int pe), (dest, value, pe),                     \
             { return gsh_val_##N(gsh_amo##B(ctx, GSH_AMO_SWAP, dest, gsh_bits_##N(value), 0, pe, fn)); }) \
    GSH_BOTHV(N##_atomic_swap_nbi, (T *fetch, T *dest, T value, int pe), (fetch, dest, value, pe),  \
              { gsh_amo_nbi##B(ctx, GSH_AMO_SWAP, fetch, dest, gsh_bits_##N(value), 0, pe, fn); })
#define GSH_AMO_COMPARE_SWAP(N, T, B)                                                               \
    GSH_BOTH(T, N##_atomic_compare_swap, (T *dest, T cond, T value, int pe), (dest, cond, value, pe), \
             { return gsh_val_##N(gsh_amo##B(ctx, GSH_AMO_COMPARE_SWAP, dest, gsh_bits_##N(value), gsh_bits_##N(cond), pe, fn)); }) \
    GSH_BOTHV(N##_atomic_compare_swap_nbi, (T *fetch, T *dest, T cond, T value, int pe), (fetch, dest, cond, value, pe), \
              { gsh_amo_nbi##B(ctx, GSH_AMO_COMPARE_SWAP, fetch, dest, gsh_bits_##N(value), gsh_bits_##N(cond), pe, fn); })
#define GSH_AMO_FETCH_INC(N, T, B)                                                                  \
    GSH_BOTH(T, N##_atomic_fetch_inc, (T *dest, int pe), (dest, pe),                                \
             { return gsh_val_##N(gsh_amo##B(ctx, GSH_AMO_FETCH_INC, dest, 1, 0, pe, fn)); }) \
    GSH_BOTHV(N##_atomic_fetch_inc_nbi, (T *fetch, T *dest, int pe), (fetch, dest, pe),             \
              { gsh_amo_nbi##B(ctx, GSH_AMO_FETCH_INC, fetch, dest, 1, 0, pe, fn); })
#define GSH_AMO_INC(N, T, B)                                                                        \
    GSH_BOTHV(N##_atomic_inc, (T *dest, int pe), (dest, pe),                                        \
              { gsh_amo##B(ctx, GSH_AMO_INC, dest, 1, 0, pe, fn); })
#define GSH_AMO_FETCH_OPV(N, T, B, OP, op)                                                          \
    GSH_BOTH(T, N##_atomic_fetch_##op, (T *dest, T value, int pe), (dest, value, pe),               \
             { return gsh_val_##N(gsh_amo##B(ctx, GSH_AMO_FETCH_##OP, dest, gsh_bits_##N(value), 0, pe, fn)); }) \
    GSH_BOTHV(N##_atomic_fetch_##op##_nbi, (T *fetch, T *dest, T value, int pe), (fetch, dest, value, pe), \
              { gsh_amo_nbi##B(ctx, GSH_AMO_FETCH_##OP, fetch, dest, gsh_bits_##N(value), 0, pe, fn); })
#define GSH_AMO_OPV(N, T, B, OP, op)                                                                \
    GSH_BOTHV(N##_atomic_##op, (T *dest, T value, int pe), (dest, value, pe),                       \
              { gsh_amo##B(ctx, GSH_AMO_##OP, dest, gsh_bits_##N(value), 0, pe, fn); })
#define GSH_AMO_FETCH_ADD(N, T, B) GSH_AMO_FETCH_OPV(N, T, B, ADD, add)
#define GSH_AMO_ADD(N, T, B) GSH_AMO_OPV(N, T, B, ADD, add)
#define GSH_AMO_FETCH_AND(N, T, B) GSH_AMO_FETCH_OPV(N, T, B, AND, and)
#define GSH_AMO_AND(N, T, B) GSH_AMO_OPV(N, T, B, AND, and)
#define GSH_AMO_FETCH_OR(N, T, B) GSH_AMO_FETCH_OPV(N, T, B, OR, or)
#define GSH_AMO_OR(N, T, B) GSH_AMO_OPV(N, T, B, OR, or)
#define GSH_AMO_FETCH_XOR(N, T, B) GSH_AMO_FETCH_OPV(N, T, B, XOR, xor)
#define GSH_AMO_XOR(N, T, B) GSH_AMO_OPV(N, T, B, XOR, xor)

/* The deprecated atomics (OpenSHMEM 1.3 names). */
#define GSH_LEGACY_SWAP(N, T)                                                                       \
    GSH_WEAK(shmem_##N##_swap) T pshmem_##N##_swap(T *target, T value, int pe) { return gsh_##N##_atomic_swap(SHMEM_CTX_DEFAULT, GSH_FN, target, value, pe); } \
    GSH_WEAK(shmem_##N##_fetch) T pshmem_##N##_fetch(const T *target, int pe) { return gsh_##N##_atomic_fetch(SHMEM_CTX_DEFAULT, GSH_FN, target, pe); } \
    GSH_WEAK(shmem_##N##_set) void pshmem_##N##_set(T *target, T value, int pe) { gsh_##N##_atomic_set(SHMEM_CTX_DEFAULT, GSH_FN, target, value, pe); }
#define GSH_LEGACY_ARITH(N, T)                                                                      \
    GSH_WEAK(shmem_##N##_cswap) T pshmem_##N##_cswap(T *target, T cond, T value, int pe) { return gsh_##N##_atomic_compare_swap(SHMEM_CTX_DEFAULT, GSH_FN, target, cond, value, pe); } \
    GSH_WEAK(shmem_##N##_fadd) T pshmem_##N##_fadd(T *target, T value, int pe) { return gsh_##N##_atomic_fetch_add(SHMEM_CTX_DEFAULT, GSH_FN, target, value, pe); } \
    GSH_WEAK(shmem_##N##_finc) T pshmem_##N##_finc(T *target, int pe) { return gsh_##N##_atomic_fetch_inc(SHMEM_CTX_DEFAULT, GSH_FN, target, pe); } \
    GSH_WEAK(shmem_##N##_add) void pshmem_##N##_add(T *target, T value, int pe) { gsh_##N##_atomic_add(SHMEM_CTX_DEFAULT, GSH_FN, target, value, pe); } \
    GSH_WEAK(shmem_##N##_inc) void pshmem_##N##_inc(T *target, int pe) { gsh_##N##_atomic_inc(SHMEM_CTX_DEFAULT, GSH_FN, target, pe); }

/* Point-to-point synchronization on local variables: loads and compares
 * here, in C, whether the variable is in the heap or in static data (the
 * updates of other PEs land without this PE's help). */
/* gsh_any_from turns the index at which the _any routines start looking,
 * call after call, so that every element that meets the condition is
 * eventually the one returned, as the specification asks. */
extern _Thread_local size_t gsh_any_from;
/* gsh_tested returns ok, the result of a test routine. A loop of tests is
 * a waiting loop, so a test that failed drives Go's progress
 * (shmem.Progress), as Go's Test does: at every failure where some PE is
 * reached through the network (what it waits for then moves at once), and
 * every 16th failure of the thread otherwise (what it waits for may be an
 * atomic that only this PE applies: see gsh_wait_pause). A test that
 * succeeds stays in C. */
extern _Thread_local unsigned gsh_test_fails;
static inline int gsh_tested(int ok) {
    if (!ok && (gsh_net_peers || (++gsh_test_fails & 15) == 0)) goshmem_go_progress();
    return ok;
}
static inline size_t gsh_tested_index(size_t i, size_t fail) {
    gsh_tested(i != fail);
    return i;
}
/* GSH_CMP defines gsh_cmpv_N, which compares x with v by cmp, and
 * gsh_cmp_N, which loads x from p first. */
#define GSH_CMP(N, T)                                                                               \
    static inline int gsh_cmpv_##N(T x, int cmp, T v, const char *fn) {                            \
        switch (cmp) {                                                                              \
        case SHMEM_CMP_EQ: return x == v;                                                           \
        case SHMEM_CMP_NE: return x != v;                                                           \
        case SHMEM_CMP_GT: return x > v;                                                            \
        case SHMEM_CMP_GE: return x >= v;                                                           \
        case SHMEM_CMP_LT: return x < v;                                                            \
        case SHMEM_CMP_LE: return x <= v;                                                           \
        }                                                                                           \
        gsh_fatal(fn, "invalid comparison %d (valid: SHMEM_CMP_EQ, _NE, _GT, _GE, _LT, _LE)", cmp); \
    }                                                                                               \
    static inline int gsh_cmp_##N(T *p, int cmp, T v, const char *fn) {                             \
        return gsh_cmpv_##N(__atomic_load_n(p, __ATOMIC_ACQUIRE), cmp, v, fn);                      \
    }
#define GSH_SYNC(N, T)                                                                              \
    GSH_CMP(N, T)                                                                                   \
    GSH_WEAK(shmem_##N##_test) int pshmem_##N##_test(T *ivar, int cmp, T cmp_value) { return gsh_tested(gsh_cmp_##N(ivar, cmp, cmp_value, GSH_FN)); } \
    GSH_WEAK(shmem_##N##_wait_until) void pshmem_##N##_wait_until(T *ivar, int cmp, T cmp_value) {                                    \
        unsigned n = 0;                                                                             \
        while (!gsh_cmp_##N(ivar, cmp, cmp_value, GSH_FN)) gsh_wait_pause(&n);                              \
    }                                                                                               \
    static int gsh_test_all_##N(const char *fn, T *ivars, size_t nelems, const int *status, int cmp, T v, const T *vs) {  \
        for (size_t i = 0; i < nelems; i++)                                                         \
            if (!(status && status[i]) && !gsh_cmp_##N(&ivars[i], cmp, vs ? vs[i] : v, fn)) return 0;   \
        return 1;                                                                                   \
    }                                                                                               \
    static size_t gsh_test_any_##N(const char *fn, T *ivars, size_t nelems, const int *status, int cmp, T v, const T *vs, int *none) { \
        *none = 1;                                                                                  \
        size_t from = nelems ? gsh_any_from++ % nelems : 0;                                         \
        for (size_t k = 0; k < nelems; k++) {                                                       \
            size_t i = from + k < nelems ? from + k : from + k - nelems;                            \
            if (status && status[i]) continue;                                                      \
            *none = 0;                                                                              \
            if (gsh_cmp_##N(&ivars[i], cmp, vs ? vs[i] : v, fn)) return i;                              \
        }                                                                                           \
        return SIZE_MAX;                                                                            \
    }                                                                                               \
    static size_t gsh_test_some_##N(const char *fn, T *ivars, size_t nelems, size_t *idx, const int *status, int cmp, T v, const T *vs, int *none) { \
        size_t k = 0;                                                                               \
        *none = 1;                                                                                  \
        for (size_t i = 0; i < nelems; i++) {                                                       \
            if (status && status[i]) continue;                                                      \
            *none = 0;                                                                              \
            if (gsh_cmp_##N(&ivars[i], cmp, vs ? vs[i] : v, fn)) idx[k++] = i;                          \
        }                                                                                           \
        return k;                                                                                   \
    }                                                                                               \
    static void gsh_wait_all_##N(const char *fn, T *ivars, size_t nelems, const int *status, int cmp, T v, const T *vs) { \
        unsigned n = 0;                                                                             \
        while (!gsh_test_all_##N(fn, ivars, nelems, status, cmp, v, vs)) gsh_wait_pause(&n);            \
    }                                                                                               \
    static size_t gsh_wait_any_##N(const char *fn, T *ivars, size_t nelems, const int *status, int cmp, T v, const T *vs) { \
        unsigned n = 0;                                                                             \
        int none;                                                                                   \
        for (;;) {                                                                                  \
            size_t i = gsh_test_any_##N(fn, ivars, nelems, status, cmp, v, vs, &none);                  \
            if (i != SIZE_MAX || none) return i;                                                    \
            gsh_wait_pause(&n);                                                                     \
        }                                                                                           \
    }                                                                                               \
    static size_t gsh_wait_some_##N(const char *fn, T *ivars, size_t nelems, size_t *idx, const int *status, int cmp, T v, const T *vs) { \
        unsigned n = 0;                                                                             \
        int none;                                                                                   \
        for (;;) {                                                                                  \
            size_t k = gsh_test_some_##N(fn, ivars, nelems, idx, status, cmp, v, vs, &none);            \
            if (k > 0 || none) return k;                                                            \
            gsh_wait_pause(&n);                                                                     \
        }                                                                                           \
    }                                                                                               \
    GSH_WEAK(shmem_##N##_wait_until_all) void pshmem_##N##_wait_until_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value) { gsh_wait_all_##N(GSH_FN, ivars, nelems, status, cmp, cmp_value, NULL); } \
    GSH_WEAK(shmem_##N##_wait_until_any) size_t pshmem_##N##_wait_until_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value) { return gsh_wait_any_##N(GSH_FN, ivars, nelems, status, cmp, cmp_value, NULL); } \
    GSH_WEAK(shmem_##N##_wait_until_some) size_t pshmem_##N##_wait_until_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, T cmp_value) { return gsh_wait_some_##N(GSH_FN, ivars, nelems, indices, status, cmp, cmp_value, NULL); } \
    GSH_WEAK(shmem_##N##_wait_until_all_vector) void pshmem_##N##_wait_until_all_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values) { gsh_wait_all_##N(GSH_FN, ivars, nelems, status, cmp, 0, cmp_values); } \
    GSH_WEAK(shmem_##N##_wait_until_any_vector) size_t pshmem_##N##_wait_until_any_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values) { return gsh_wait_any_##N(GSH_FN, ivars, nelems, status, cmp, 0, cmp_values); } \
    GSH_WEAK(shmem_##N##_wait_until_some_vector) size_t pshmem_##N##_wait_until_some_vector(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, const T *cmp_values) { return gsh_wait_some_##N(GSH_FN, ivars, nelems, indices, status, cmp, 0, cmp_values); } \
    GSH_WEAK(shmem_##N##_test_all) int pshmem_##N##_test_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value) { return gsh_tested(gsh_test_all_##N(GSH_FN, ivars, nelems, status, cmp, cmp_value, NULL)); } \
    GSH_WEAK(shmem_##N##_test_any) size_t pshmem_##N##_test_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value) { int none; return gsh_tested_index(gsh_test_any_##N(GSH_FN, ivars, nelems, status, cmp, cmp_value, NULL, &none), SIZE_MAX); } \
    GSH_WEAK(shmem_##N##_test_some) size_t pshmem_##N##_test_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, T cmp_value) { int none; return gsh_tested_index(gsh_test_some_##N(GSH_FN, ivars, nelems, indices, status, cmp, cmp_value, NULL, &none), 0); } \
    GSH_WEAK(shmem_##N##_test_all_vector) int pshmem_##N##_test_all_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values) { return gsh_tested(gsh_test_all_##N(GSH_FN, ivars, nelems, status, cmp, 0, cmp_values)); } \
    GSH_WEAK(shmem_##N##_test_any_vector) size_t pshmem_##N##_test_any_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values) { int none; return gsh_tested_index(gsh_test_any_##N(GSH_FN, ivars, nelems, status, cmp, 0, cmp_values, &none), SIZE_MAX); } \
    GSH_WEAK(shmem_##N##_test_some_vector) size_t pshmem_##N##_test_some_vector(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, const T *cmp_values) { int none; return gsh_tested_index(gsh_test_some_##N(GSH_FN, ivars, nelems, indices, status, cmp, 0, cmp_values, &none), 0); }

#define GSH_LEGACY_WAIT(N, T) \
    GSH_WEAK(shmem_##N##_wait) void pshmem_##N##_wait(T *ivar, T cmp_value) { pshmem_##N##_wait_until(ivar, SHMEM_CMP_NE, cmp_value); }

/* Reductions. gsh_combine_N_OP(acc, in, n) folds in into acc. */
typedef void (*gsh_combine_fn)(void *acc, const void *in, size_t n);
#define GSH_COMBINE(N, T, op, EXPR)                                                                 \
    static void gsh_combine_##N##_##op(void *acc_, const void *in_, size_t n) {                     \
        T *a = acc_;                                                                                \
        const T *b = in_;                                                                           \
        for (size_t i = 0; i < n; i++) { T x = a[i], y = b[i]; a[i] = (EXPR); }                     \
    }
#define GSH_COMBINE_AND(N, T) GSH_COMBINE(N, T, and, x & y)
#define GSH_COMBINE_OR(N, T) GSH_COMBINE(N, T, or, x | y)
#define GSH_COMBINE_XOR(N, T) GSH_COMBINE(N, T, xor, x ^ y)
#define GSH_COMBINE_MAX(N, T) GSH_COMBINE(N, T, max, x > y ? x : y)
#define GSH_COMBINE_MIN(N, T) GSH_COMBINE(N, T, min, x < y ? x : y)
#define GSH_COMBINE_SUM(N, T) GSH_COMBINE(N, T, sum, x + y)
#define GSH_COMBINE_PROD(N, T) GSH_COMBINE(N, T, prod, x * y)

int gsh_coll(shmem_team_t team, int kind, void *dest, const void *source, size_t nbytes, ptrdiff_t a, ptrdiff_t b, int esize,
             const char *fn);
int gsh_reduce(shmem_team_t team, int op, int ty, void *dest, const void *source, size_t n, size_t esize, gsh_combine_fn f, const char *fn);
void gsh_to_all(void *dest, const void *source, int nreduce, size_t esize, int PE_start, int logPE_stride, int PE_size, long *pSync, gsh_combine_fn f, const char *fn);

#define GSH_REDUCE(N, T, op, OPNUM, TY)                                                             \
    GSH_WEAK(shmem_##N##_##op##_reduce) int pshmem_##N##_##op##_reduce(shmem_team_t team, T *dest, const T *source, size_t nreduce) {    \
        return gsh_reduce(team, OPNUM, TY, dest, source, nreduce, sizeof(T), gsh_combine_##N##_##op, GSH_FN); \
    }
#define GSH_SCAN(N, T, TY)                                                                          \
    GSH_WEAK(shmem_##N##_sum_inscan) int pshmem_##N##_sum_inscan(shmem_team_t team, T *dest, const T *source, size_t nelems) {        \
        return gsh_reduce(team, 7, TY, dest, source, nelems, sizeof(T), gsh_combine_##N##_sum, GSH_FN);             \
    }                                                                                               \
    GSH_WEAK(shmem_##N##_sum_exscan) int pshmem_##N##_sum_exscan(shmem_team_t team, T *dest, const T *source, size_t nelems) {        \
        return gsh_reduce(team, 8, TY, dest, source, nelems, sizeof(T), gsh_combine_##N##_sum, GSH_FN);             \
    }
#define GSH_TO_ALL(N, T, op)                                                                        \
    GSH_WEAK(shmem_##N##_##op##_to_all) void pshmem_##N##_##op##_to_all(T *dest, const T *source, int nreduce, int PE_start, int logPE_stride, int PE_size, T *pWrk, long *pSync) { \
        (void)pWrk;                                                                                 \
        gsh_to_all(dest, source, nreduce, sizeof(T), PE_start, logPE_stride, PE_size, pSync, gsh_combine_##N##_##op, GSH_FN); \
    }

/* Team collectives of type T. */
#define GSH_COLL(N, T)                                                                              \
    GSH_WEAK(shmem_##N##_broadcast) int pshmem_##N##_broadcast(shmem_team_t team, T *dest, const T *source, size_t nelems, int PE_root) { \
        return gsh_coll(team, GSH_COLL_BROADCAST, dest, source, nelems * sizeof(T), PE_root, 0, sizeof(T), GSH_FN); \
    }                                                                                               \
    GSH_WEAK(shmem_##N##_collect) int pshmem_##N##_collect(shmem_team_t team, T *dest, const T *source, size_t nelems) {           \
        return gsh_coll(team, GSH_COLL_COLLECT, dest, source, nelems * sizeof(T), 0, 0, sizeof(T), GSH_FN); \
    }                                                                                               \
    GSH_WEAK(shmem_##N##_fcollect) int pshmem_##N##_fcollect(shmem_team_t team, T *dest, const T *source, size_t nelems) {          \
        return gsh_coll(team, GSH_COLL_FCOLLECT, dest, source, nelems * sizeof(T), 0, 0, sizeof(T), GSH_FN); \
    }                                                                                               \
    GSH_WEAK(shmem_##N##_alltoall) int pshmem_##N##_alltoall(shmem_team_t team, T *dest, const T *source, size_t nelems) {          \
        return gsh_coll(team, GSH_COLL_ALLTOALL, dest, source, nelems * sizeof(T), 0, 0, sizeof(T), GSH_FN); \
    }                                                                                               \
    GSH_WEAK(shmem_##N##_alltoalls) int pshmem_##N##_alltoalls(shmem_team_t team, T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems) { \
        return gsh_coll(team, GSH_COLL_ALLTOALLS, dest, source, nelems * sizeof(T), dst, sst, sizeof(T), GSH_FN); \
    }

#endif /* GOSHMEM_GSH_H */
