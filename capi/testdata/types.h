/* types.h: the per-type tests of ztypes.c, which capi/gen writes from the
 * type table (the rows and the families each takes part in). Each
 * TEST_* macro defines the test of one family for the type T named N;
 * the values are small integers, exact in every type, so that results
 * compare with ==. */
#include <complex.h>
#include <shmem.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static int me, npes, right, left;
static shmem_ctx_t ctx; /* a context of the world team (not the default one) */
static long pSync[SHMEM_REDUCE_SYNC_SIZE];
static long double _Complex pWrk[64];
static uint64_t sig;

/* V is element i of PE p's source. */
#define V(T, p, i) ((T)((p) * 4 + (i) % 4 + 1))

/* RMA: every routine of the family, default and context forms, checked
 * on the right PE (what the left PE sent) or here (what a get fetched). */
#define TEST_RMA(N, T)                                                                                         \
    static T N##_d[16];                                                                                        \
    static void test_rma_##N(void) {                                                                          \
        T src[16], got[16];                                                                                    \
        for (int i = 0; i < 16; i++) src[i] = V(T, me, i);                                                     \
        memset(N##_d, 0, sizeof N##_d);                                                                        \
        shmem_barrier_all();                                                                                   \
        shmem_##N##_put(N##_d, src, 4, right);                                                                 \
        shmem_ctx_##N##_put_nbi(ctx, N##_d + 4, src + 4, 4, right);                                            \
        shmem_##N##_p(&N##_d[8], src[8], right);                                                               \
        shmem_##N##_iput(N##_d + 9, src, 2, 1, 2, right);                                                      \
        shmem_ctx_##N##_ibput(ctx, N##_d + 12, src, 2, 2, 1, 2, right);                                        \
        shmem_ctx_quiet(ctx);                                                                                  \
        shmem_##N##_put_signal(N##_d + 13, src + 3, 1, &sig, 1, SHMEM_SIGNAL_ADD, right);                     \
        shmem_ctx_##N##_put_signal_nbi(ctx, N##_d + 15, src + 3, 1, &sig, 1, SHMEM_SIGNAL_ADD, right);        \
        shmem_signal_wait_until(&sig, SHMEM_CMP_EQ, 2);                                                        \
        shmem_barrier_all();                                                                                   \
        sig = 0;                                                                                               \
        for (int i = 0; i < 9; i++) CHECK(N##_d[i] == V(T, left, i));                                          \
        CHECK(N##_d[9] == V(T, left, 0) && N##_d[10] == 0 && N##_d[11] == V(T, left, 1));                      \
        CHECK(N##_d[12] == V(T, left, 0) && N##_d[14] == V(T, left, 2));                                       \
        CHECK(N##_d[13] == V(T, left, 3) && N##_d[15] == V(T, left, 3));                                       \
        memset(got, 0, sizeof got);                                                                            \
        shmem_##N##_get(got, N##_d, 4, right);                                                                 \
        shmem_ctx_##N##_get_nbi(ctx, got + 4, N##_d + 4, 4, right);                                            \
        shmem_ctx_quiet(ctx);                                                                                  \
        for (int i = 0; i < 8; i++) CHECK(got[i] == V(T, me, i));                                              \
        CHECK(shmem_##N##_g(&N##_d[8], right) == V(T, me, 8) && shmem_ctx_##N##_g(ctx, &N##_d[9], right) == V(T, me, 0)); \
        shmem_##N##_iget(got, N##_d + 9, 1, 2, 2, right);                                                      \
        CHECK(got[0] == V(T, me, 0) && got[1] == V(T, me, 1));                                                 \
        shmem_##N##_ibget(got, N##_d + 12, 2, 2, 1, 2, right);                                                 \
        CHECK(got[0] == V(T, me, 0) && got[2] == V(T, me, 2));                                                 \
        shmem_##N##_get_nbi(got, N##_d, 1, right);                                                             \
        shmem_quiet();                                                                                         \
        CHECK(got[0] == V(T, me, 0));                                                                          \
        shmem_barrier_all();                                                                                   \
    }

/* Team collectives of the RMA types. */
#define TEST_COLL(N, T)                                                                                        \
    static void test_coll_##N(void) {                                                                          \
        T *s = shmem_malloc(4 * npes * sizeof(T)), *d = shmem_malloc(4 * npes * sizeof(T));                    \
        CHECK(s && d);                                                                                         \
        for (int i = 0; i < 4 * npes; i++) s[i] = V(T, me, i);                                                 \
        int root = 1 % npes;                                                                                   \
        CHECK(shmem_##N##_broadcast(SHMEM_TEAM_WORLD, d, s, 3, root) == 0);                                    \
        for (int i = 0; i < 3; i++) CHECK(d[i] == V(T, root, i));                                              \
        CHECK(shmem_##N##_fcollect(SHMEM_TEAM_WORLD, d, s, 2) == 0);                                           \
        for (int p = 0; p < npes; p++) CHECK(d[2 * p] == V(T, p, 0) && d[2 * p + 1] == V(T, p, 1));            \
        CHECK(shmem_##N##_collect(SHMEM_TEAM_WORLD, d, s, me % 2 + 1) == 0);                                   \
        for (int p = 0, k = 0; p < npes; p++)                                                                  \
            for (int i = 0; i <= p % 2; i++, k++) CHECK(d[k] == V(T, p, i));                                   \
        for (int i = 0; i < npes; i++) s[i] = (T)(me * 8 + i);                                                 \
        CHECK(shmem_##N##_alltoall(SHMEM_TEAM_WORLD, d, s, 1) == 0);                                           \
        for (int p = 0; p < npes; p++) CHECK(d[p] == (T)(p * 8 + me));                                         \
        CHECK(shmem_##N##_alltoalls(SHMEM_TEAM_WORLD, d, s, 2, 1, 1) == 0);                                    \
        for (int p = 0; p < npes; p++) CHECK(d[2 * p] == (T)(p * 8 + me));                                     \
        shmem_barrier_all();                                                                                   \
        shmem_free(s);                                                                                         \
        shmem_free(d);                                                                                         \
    }

/* The atomics of the extended AMO types (fetch, set, swap), on the right
 * PE's variable, then the left PE's work checked here. */
#define TEST_AMO_EXT(N, T)                                                                                     \
    static T N##_x[2];                                                                                         \
    static void test_amo_ext_##N(void) {                                                                       \
        T f = 0;                                                                                               \
        shmem_barrier_all();                                                                                   \
        shmem_##N##_atomic_set(&N##_x[0], (T)5, right);                                                        \
        shmem_barrier_all();                                                                                   \
        CHECK(N##_x[0] == (T)5 && shmem_##N##_atomic_fetch(&N##_x[0], right) == (T)5);                         \
        shmem_barrier_all(); /* checked before the left PE swaps it */                                         \
        CHECK(shmem_ctx_##N##_atomic_swap(ctx, &N##_x[0], (T)7, right) == (T)5);                               \
        shmem_##N##_atomic_fetch_nbi(&f, &N##_x[0], right);                                                    \
        shmem_quiet();                                                                                         \
        CHECK(f == (T)7);                                                                                      \
        shmem_ctx_##N##_atomic_swap_nbi(ctx, &f, &N##_x[0], (T)9, right);                                      \
        shmem_ctx_quiet(ctx);                                                                                  \
        CHECK(f == (T)7);                                                                                      \
        shmem_ctx_##N##_atomic_set(ctx, &N##_x[1], (T)3, right);                                               \
        shmem_ctx_quiet(ctx);                                                                                  \
        shmem_barrier_all();                                                                                   \
        CHECK(N##_x[0] == (T)9 && N##_x[1] == (T)3 && shmem_ctx_##N##_atomic_fetch(ctx, &N##_x[1], me) == (T)3); \
        shmem_barrier_all();                                                                                   \
    }

/* The atomics of the standard AMO types: TEST_AMO_EXT's and the
 * arithmetic ones, and every PE incrementing PE 0's counter. */
#define TEST_AMO_STD(N, T)                                                                                     \
    TEST_AMO_EXT(N, T)                                                                                         \
    static T N##_a[2];                                                                                         \
    static void test_amo_std_##N(void) {                                                                       \
        T f = 0;                                                                                               \
        test_amo_ext_##N();                                                                                    \
        shmem_##N##_atomic_set(&N##_a[0], (T)7, right);                                                        \
        shmem_quiet();                                                                                         \
        CHECK(shmem_##N##_atomic_compare_swap(&N##_a[0], (T)7, (T)9, right) == (T)7);                          \
        CHECK(shmem_ctx_##N##_atomic_compare_swap(ctx, &N##_a[0], (T)1, (T)2, right) == (T)9);                 \
        CHECK(shmem_##N##_atomic_fetch_inc(&N##_a[0], right) == (T)9);                                        \
        shmem_ctx_##N##_atomic_inc(ctx, &N##_a[0], right);                                                     \
        shmem_ctx_quiet(ctx); /* the operations of two contexts are not ordered */                             \
        CHECK(shmem_ctx_##N##_atomic_fetch_add(ctx, &N##_a[0], (T)3, right) == (T)11);                         \
        shmem_##N##_atomic_add(&N##_a[0], (T)2, right);                                                        \
        shmem_quiet();                                                                                         \
        shmem_##N##_atomic_compare_swap_nbi(&f, &N##_a[0], (T)16, (T)1, right);                                \
        shmem_quiet();                                                                                         \
        CHECK(f == (T)16);                                                                                     \
        shmem_ctx_##N##_atomic_fetch_inc_nbi(ctx, &f, &N##_a[0], right);                                       \
        shmem_ctx_quiet(ctx);                                                                                  \
        CHECK(f == (T)1);                                                                                      \
        shmem_##N##_atomic_fetch_add_nbi(&f, &N##_a[0], (T)10, right);                                         \
        shmem_quiet();                                                                                         \
        CHECK(f == (T)2);                                                                                      \
        for (int i = 0; i < 10; i++) shmem_##N##_atomic_inc(&N##_a[1], 0);                                    \
        shmem_barrier_all();                                                                                   \
        CHECK(N##_a[0] == (T)12);                                                                              \
        if (me == 0) CHECK(N##_a[1] == (T)(10 * npes));                                                        \
        shmem_barrier_all();                                                                                   \
    }

/* The bitwise atomics. */
#define TEST_AMO_BIT(N, T)                                                                                     \
    static T N##_b;                                                                                            \
    static void test_amo_bit_##N(void) {                                                                       \
        T f = 0;                                                                                               \
        shmem_barrier_all();                                                                                   \
        shmem_##N##_atomic_set(&N##_b, (T)0xf0, right);                                                        \
        shmem_quiet();                                                                                         \
        CHECK(shmem_##N##_atomic_fetch_and(&N##_b, (T)0x3c, right) == (T)0xf0);                                \
        CHECK(shmem_ctx_##N##_atomic_fetch_or(ctx, &N##_b, (T)0x03, right) == (T)0x30);                        \
        CHECK(shmem_##N##_atomic_fetch_xor(&N##_b, (T)0x11, right) == (T)0x33);                                \
        shmem_##N##_atomic_and(&N##_b, (T)0x2f, right);                                                        \
        shmem_quiet();                                                                                         \
        shmem_ctx_##N##_atomic_or(ctx, &N##_b, (T)0x40, right);                                                \
        shmem_ctx_quiet(ctx);                                                                                  \
        shmem_##N##_atomic_xor(&N##_b, (T)0x01, right);                                                        \
        shmem_quiet();                                                                                         \
        shmem_##N##_atomic_fetch_and_nbi(&f, &N##_b, (T)0xff, right);                                          \
        shmem_quiet();                                                                                         \
        CHECK(f == (T)0x63);                                                                                   \
        shmem_ctx_##N##_atomic_fetch_or_nbi(ctx, &f, &N##_b, (T)0x80, right);                                  \
        shmem_ctx_quiet(ctx);                                                                                  \
        CHECK(f == (T)0x63);                                                                                   \
        shmem_##N##_atomic_fetch_xor_nbi(&f, &N##_b, (T)0xe3, right);                                          \
        shmem_quiet();                                                                                         \
        CHECK(f == (T)0xe3);                                                                                   \
        shmem_barrier_all();                                                                                   \
        CHECK(N##_b == 0);                                                                                     \
        shmem_barrier_all();                                                                                   \
    }

/* Point-to-point synchronization: every comparison of wait_until and
 * test, and the all/any/some and vector forms, on what the left PE put. */
#define TEST_SYNC(N, T)                                                                                        \
    static T N##_w[2];                                                                                         \
    static void test_sync_##N(void) {                                                                          \
        int cmps[6] = {SHMEM_CMP_EQ, SHMEM_CMP_NE, SHMEM_CMP_GT, SHMEM_CMP_GE, SHMEM_CMP_LT, SHMEM_CMP_LE};     \
        T yes[6] = {3, 4, 2, 3, 4, 3}, no[6] = {4, 3, 3, 4, 3, 2};                                             \
        int status[2] = {0, 1};                                                                                \
        size_t idx[2];                                                                                         \
        shmem_barrier_all();                                                                                   \
        shmem_##N##_p(&N##_w[1], (T)5, right);                                                                 \
        shmem_fence();                                                                                         \
        shmem_##N##_p(&N##_w[0], (T)3, right);                                                                 \
        for (int k = 0; k < 6; k++) {                                                                          \
            shmem_##N##_wait_until(&N##_w[0], cmps[k], yes[k]);                                                \
            CHECK(shmem_##N##_test(&N##_w[0], cmps[k], yes[k]) && !shmem_##N##_test(&N##_w[0], cmps[k], no[k])); \
        }                                                                                                      \
        T v[2] = {3, 5}, w[2] = {3, 6};                                                                        \
        shmem_##N##_wait_until_all(N##_w, 2, NULL, SHMEM_CMP_GE, (T)3);                                        \
        CHECK(shmem_##N##_wait_until_any(N##_w, 2, NULL, SHMEM_CMP_EQ, (T)5) == 1);                            \
        CHECK(shmem_##N##_wait_until_some(N##_w, 2, idx, NULL, SHMEM_CMP_GT, (T)2) == 2 && idx[1] == 1);      \
        shmem_##N##_wait_until_all_vector(N##_w, 2, NULL, SHMEM_CMP_EQ, v);                                    \
        CHECK(shmem_##N##_wait_until_any_vector(N##_w, 2, status, SHMEM_CMP_EQ, w) == 0);                      \
        CHECK(shmem_##N##_wait_until_some_vector(N##_w, 2, idx, NULL, SHMEM_CMP_EQ, w) == 1 && idx[0] == 0);  \
        CHECK(shmem_##N##_test_all(N##_w, 2, NULL, SHMEM_CMP_LE, (T)5) && !shmem_##N##_test_all(N##_w, 2, NULL, SHMEM_CMP_LT, (T)5)); \
        CHECK(shmem_##N##_test_all(N##_w, 2, status, SHMEM_CMP_LT, (T)5));                                    \
        CHECK(shmem_##N##_test_any(N##_w, 2, NULL, SHMEM_CMP_GT, (T)4) == 1);                                  \
        CHECK(shmem_##N##_test_any(N##_w, 2, status, SHMEM_CMP_GT, (T)4) == SIZE_MAX);                         \
        CHECK(shmem_##N##_test_some(N##_w, 2, idx, NULL, SHMEM_CMP_NE, (T)3) == 1 && idx[0] == 1);             \
        CHECK(shmem_##N##_test_all_vector(N##_w, 2, NULL, SHMEM_CMP_EQ, v) && !shmem_##N##_test_all_vector(N##_w, 2, NULL, SHMEM_CMP_EQ, w)); \
        CHECK(shmem_##N##_test_any_vector(N##_w, 2, NULL, SHMEM_CMP_GT, w) == SIZE_MAX);                      \
        CHECK(shmem_##N##_test_some_vector(N##_w, 2, idx, NULL, SHMEM_CMP_LE, v) == 2);                        \
        shmem_barrier_all();                                                                                   \
        N##_w[0] = N##_w[1] = 0;                                                                               \
        shmem_barrier_all();                                                                                   \
    }

/* RV is element i of PE p's reduction source: 1 or 2, and p+1 in
 * element 0, so that sums and products stay small. */
#define RV(T, p, i) ((T)((i) == 0 ? (p) + 1 : ((p) + (i)) % 2 + 1))

/* FOLD is element i of the reduction of every PE's RV by EXPR (which
 * folds y into x), a GNU statement expression. */
#define FOLD(T, EXPR, i)                                                                                       \
    __extension__({                                                                                            \
        T x = RV(T, 0, i);                                                                                     \
        for (int p = 1; p < npes; p++) {                                                                       \
            T y = RV(T, p, i);                                                                                 \
            x = (EXPR);                                                                                        \
        }                                                                                                      \
        x;                                                                                                     \
    })

/* A team reduction of operation op (EXPR folds x and y), checked against
 * the same fold here. */
#define TEST_RED(N, T, op, EXPR)                                                                               \
    static void test_red_##N##_##op(void) {                                                                    \
        T *s = shmem_malloc(3 * sizeof(T)), *d = shmem_malloc(3 * sizeof(T));                                  \
        CHECK(s && d);                                                                                         \
        for (int i = 0; i < 3; i++) s[i] = RV(T, me, i);                                                       \
        CHECK(shmem_##N##_##op##_reduce(SHMEM_TEAM_WORLD, d, s, 3) == 0);                                      \
        for (int i = 0; i < 3; i++) CHECK(d[i] == FOLD(T, EXPR, i));                                           \
        shmem_barrier_all();                                                                                   \
        shmem_free(s);                                                                                         \
        shmem_free(d);                                                                                         \
    }

/* The active-set form, shmem_N_op_to_all, over every PE. */
#define TEST_TO_ALL(N, T, op, EXPR)                                                                            \
    static T N##_##op##_ts[3], N##_##op##_td[3];                                                               \
    static void test_to_all_##N##_##op(void) {                                                                 \
        for (int i = 0; i < 3; i++) N##_##op##_ts[i] = RV(T, me, i);                                           \
        shmem_barrier_all();                                                                                   \
        shmem_##N##_##op##_to_all(N##_##op##_td, N##_##op##_ts, 3, 0, 0, npes, (T *)pWrk, pSync);               \
        for (int i = 0; i < 3; i++) CHECK(N##_##op##_td[i] == FOLD(T, EXPR, i));                               \
        shmem_barrier_all();                                                                                   \
    }

#define AND_EXPR x & y
#define OR_EXPR x | y
#define XOR_EXPR x ^ y
#define MAX_EXPR x > y ? x : y
#define MIN_EXPR x < y ? x : y
#define SUM_EXPR x + y
#define PROD_EXPR x * y

/* The sum scans. */
#define TEST_SCAN(N, T)                                                                                        \
    static void test_scan_##N(void) {                                                                          \
        T *s = shmem_malloc(2 * sizeof(T)), *d = shmem_malloc(2 * sizeof(T));                                  \
        CHECK(s && d);                                                                                         \
        for (int i = 0; i < 2; i++) s[i] = RV(T, me, i);                                                       \
        CHECK(shmem_##N##_sum_inscan(SHMEM_TEAM_WORLD, d, s, 2) == 0);                                         \
        for (int i = 0; i < 2; i++) {                                                                          \
            T x = 0;                                                                                           \
            for (int p = 0; p <= me; p++) x += RV(T, p, i);                                                    \
            CHECK(d[i] == x);                                                                                  \
        }                                                                                                      \
        CHECK(shmem_##N##_sum_exscan(SHMEM_TEAM_WORLD, d, s, 2) == 0);                                         \
        for (int i = 0; i < 2 && me > 0; i++) {                                                                \
            T x = 0;                                                                                           \
            for (int p = 0; p < me; p++) x += RV(T, p, i);                                                     \
            CHECK(d[i] == x);                                                                                  \
        }                                                                                                      \
        shmem_barrier_all();                                                                                   \
        shmem_free(s);                                                                                         \
        shmem_free(d);                                                                                         \
    }

static void setup(void) {
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) pSync[i] = SHMEM_SYNC_VALUE;
    CHECK(shmem_ctx_create(0, &ctx) == 0);
    shmem_barrier_all();
}

static void teardown(const char *name) {
    shmem_ctx_destroy(ctx);
    shmem_barrier_all();
    if (me == 0) printf("%s: PASS on %d PEs\n", name, npes);
    shmem_finalize();
}
