/* generic: every family of routines called through its C11 generic form
 * (compiled with -std=c11 -Wall -Wextra -Werror -pedantic), with and
 * without a context, on types whose association is easy to get wrong
 * (int32_t's bitwise atomics, char's reductions, float's swap, complex
 * sums); run on 2+ PEs, it checks each landed on the routine of its type. */
#include <complex.h>
#include <limits.h>
#include <shmem.h>
#include <stdio.h>

#include "check.h"

static double d[8];
static float f;
static int32_t i32;
static uint64_t u64, sig;
static long lv[4];
static int iv[4];

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
    shmem_ctx_t ctx = SHMEM_CTX_DEFAULT;

    /* RMA. */
    double src[8];
    for (int i = 0; i < 8; i++) src[i] = me + i / 8.0;
    shmem_put(d, src, 4, right);
    shmem_put(ctx, d + 4, src + 4, 4, right);
    shmem_p(&f, 1.5f + (float)me, right);
    shmem_barrier_all();
    CHECK(d[1] == left + 1 / 8.0 && d[7] == left + 7 / 8.0 && f == 1.5f + (float)left);
    double got[8];
    shmem_get(got, d, 8, right);
    shmem_get(ctx, got, d, 1, right);
    CHECK(got[0] == me && got[3] == me + 3 / 8.0);
    CHECK(shmem_g(&f, right) == 1.5f + (float)me && shmem_g(ctx, &d[2], right) == me + 2 / 8.0);
    shmem_put_nbi(d, src, 8, right);
    shmem_get_nbi(got, d, 8, me);
    shmem_put_nbi(ctx, d, src, 8, right);
    shmem_get_nbi(ctx, got, d, 8, me);
    shmem_iput(d, src, 2, 1, 4, right);
    shmem_iget(got, d, 1, 2, 4, right);
    shmem_ibput(ctx, d, src, 4, 4, 2, 2, right);
    shmem_ibget(got, d, 4, 4, 2, 2, right);
    shmem_put_signal(lv, lv, 4, &sig, 1, SHMEM_SIGNAL_ADD, right);
    shmem_put_signal_nbi(ctx, lv, lv, 4, &sig, 1, SHMEM_SIGNAL_ADD, right);
    shmem_signal_add(&sig, 1, right);
    shmem_signal_add(ctx, &sig, 1, right);
    shmem_quiet();
    CHECK(shmem_signal_wait_until(&sig, SHMEM_CMP_GE, 4) >= 4);
    shmem_barrier_all();
    shmem_signal_set(&sig, 0, me);
    shmem_signal_set(ctx, &sig, 0, me);
    CHECK(shmem_signal_fetch(&sig) == 0);

    /* Atomics: float's swap and fetch, int32_t's bitwise ones (int32_t is
     * int, which has none), uint64_t's arithmetic. */
    shmem_barrier_all();
    float old = shmem_atomic_swap(&f, 2.5f, right);
    CHECK(old == 1.5f + (float)me);
    shmem_barrier_all();
    CHECK(shmem_atomic_fetch(&f, me) == 2.5f && shmem_atomic_fetch(ctx, &f, me) == 2.5f);
    shmem_atomic_set(&i32, 0x0f, me);
    shmem_barrier_all();
    shmem_atomic_or(&i32, 0x30, me);
    shmem_atomic_and(ctx, &i32, 0x3c, me);
    shmem_atomic_xor(&i32, 0x01, me);
    CHECK(shmem_atomic_fetch_or(&i32, 0, me) == 0x3d);
    CHECK(shmem_atomic_fetch_and(ctx, &i32, 0x0f, me) == 0x3d);
    CHECK(shmem_atomic_fetch_xor(&i32, 0x0f, me) == 0x0d);
    int32_t f32;
    shmem_atomic_fetch_xor_nbi(&f32, &i32, 0, me);
    shmem_atomic_fetch_and_nbi(ctx, &f32, &i32, -1, me);
    shmem_atomic_fetch_or_nbi(&f32, &i32, 0, me);
    shmem_quiet();
    CHECK(f32 == 0x02);
    shmem_atomic_add(&u64, 2, right);
    shmem_atomic_inc(ctx, &u64, right);
    shmem_barrier_all();
    CHECK(shmem_atomic_fetch_inc(&u64, me) == 3 && shmem_atomic_fetch_add(ctx, &u64, 10, me) == 4);
    CHECK(shmem_atomic_compare_swap(&u64, 14, 20, me) == 14 && u64 == 20);
    uint64_t fu;
    shmem_atomic_compare_swap_nbi(ctx, &fu, &u64, 20, 21, me);
    shmem_atomic_fetch_inc_nbi(&fu, &u64, me);
    shmem_atomic_fetch_add_nbi(&fu, &u64, 1, me);
    shmem_atomic_swap_nbi(&fu, &u64, 7, me);
    shmem_atomic_fetch_nbi(ctx, &fu, &u64, me);
    shmem_quiet();
    CHECK(fu == 7);
    /* The deprecated generic atomics. */
    long lo = shmem_swap(&lv[0], 5L, me);
    (void)lo;
    CHECK(shmem_fetch(&lv[0], me) == 5 && shmem_cswap(&lv[0], 5L, 6L, me) == 5);
    shmem_set(&lv[1], 1L, me);
    shmem_add(&lv[1], 1L, me);
    shmem_inc(&lv[1], me);
    CHECK(shmem_fadd(&lv[1], 1L, me) == 3 && shmem_finc(&lv[1], me) == 4);
    shmem_barrier_all();

    /* Point-to-point synchronization. */
    int status[4] = {0, 0, 0, 0};
    size_t idx[4];
    for (int i = 0; i < 4; i++) shmem_atomic_set(&iv[i], i + 1, right);
    shmem_wait_until(&iv[3], SHMEM_CMP_EQ, 4);
    shmem_wait_until_all(iv, 4, status, SHMEM_CMP_GT, 0);
    CHECK(shmem_wait_until_any(iv, 4, status, SHMEM_CMP_EQ, 3) == 2);
    CHECK(shmem_wait_until_some(iv, 4, idx, status, SHMEM_CMP_GE, 3) == 2 && idx[0] == 2 && idx[1] == 3);
    int want[4] = {1, 2, 3, 4};
    shmem_wait_until_all_vector(iv, 4, status, SHMEM_CMP_EQ, want);
    CHECK(shmem_wait_until_any_vector(iv, 4, status, SHMEM_CMP_EQ, want) < 4);
    CHECK(shmem_wait_until_some_vector(iv, 4, idx, status, SHMEM_CMP_EQ, want) == 4);
    CHECK(shmem_test(&iv[0], SHMEM_CMP_EQ, 1) && shmem_test_all(iv, 4, status, SHMEM_CMP_LE, 4));
    CHECK(shmem_test_any(iv, 4, status, SHMEM_CMP_EQ, 9) == SIZE_MAX && shmem_test_some(iv, 4, idx, status, SHMEM_CMP_EQ, 1) == 1);
    CHECK(shmem_test_all_vector(iv, 4, status, SHMEM_CMP_EQ, want) && shmem_test_any_vector(iv, 4, status, SHMEM_CMP_NE, want) == SIZE_MAX);
    CHECK(shmem_test_some_vector(iv, 4, idx, status, SHMEM_CMP_EQ, want) == 4);
    shmem_barrier_all();

    /* Collectives: char reduces with char's own signedness; complex sums. */
    char *cs = shmem_malloc(2), *cd = shmem_malloc(2);
    cs[0] = (char)(me == 0 ? CHAR_MAX : 1);
    cs[1] = (char)me;
    shmem_max_reduce(SHMEM_TEAM_WORLD, cd, cs, 2);
    CHECK(cd[0] == CHAR_MAX && cd[1] == (char)(n - 1));
    shmem_min_reduce(SHMEM_TEAM_WORLD, cd, cs, 2);
    CHECK(cd[0] == 1 && cd[1] == 0);
    double _Complex *zs = shmem_malloc(sizeof(double _Complex)), *zd = shmem_malloc(sizeof(double _Complex));
    *zs = me + 1.0 * I;
    shmem_sum_reduce(SHMEM_TEAM_WORLD, zd, zs, 1);
    CHECK(creal(*zd) == n * (n - 1) / 2.0 && cimag(*zd) == n);
    shmem_prod_reduce(SHMEM_TEAM_WORLD, zd, zs, 1);
    int32_t *is = shmem_malloc(2 * sizeof(int32_t)), *id = shmem_malloc(2 * n * sizeof(int32_t));
    is[0] = 1 << me;
    is[1] = me;
    shmem_or_reduce(SHMEM_TEAM_WORLD, id, is, 1);
    CHECK(id[0] == (1 << n) - 1);
    shmem_and_reduce(SHMEM_TEAM_WORLD, id, is, 1);
    shmem_xor_reduce(SHMEM_TEAM_WORLD, id, is, 1);
    shmem_sum_inscan(SHMEM_TEAM_WORLD, id, is + 1, 1);
    CHECK(id[0] == me * (me + 1) / 2);
    shmem_sum_exscan(SHMEM_TEAM_WORLD, id, is + 1, 1);
    if (me > 0) CHECK(id[0] == me * (me - 1) / 2);
    shmem_broadcast(SHMEM_TEAM_WORLD, id, is, 2, 0);
    CHECK(id[0] == 1 && id[1] == 0);
    shmem_fcollect(SHMEM_TEAM_WORLD, id, is + 1, 1);
    shmem_collect(SHMEM_TEAM_WORLD, id, is + 1, 1);
    for (int p = 0; p < n; p++) CHECK(id[p] == p);
    int32_t *a2 = shmem_malloc(n * sizeof(int32_t));
    for (int p = 0; p < n; p++) a2[p] = me * 100 + p;
    shmem_alltoall(SHMEM_TEAM_WORLD, id, a2, 1);
    for (int p = 0; p < n; p++) CHECK(id[p] == p * 100 + me);
    shmem_alltoalls(SHMEM_TEAM_WORLD, id, a2, 1, 1, 1);
    CHECK(shmem_sync(SHMEM_TEAM_WORLD) == 0);
    shmem_barrier_all();
    if (me == 0) printf("generic: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
