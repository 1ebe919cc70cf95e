/* colls: active-set collectives with pSync, team collectives, locks, teams,
 * contexts, signals, strided and nbi transfers, shmem_ptr. */
#include <shmem.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static long pSync[SHMEM_REDUCE_SYNC_SIZE];
static long pWrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static long lock;
static long shared_count;
static long src64[8], dst64[64];
static int src32[8], dst32[64];
static uint64_t sig;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) pSync[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();

    /* Active sets over every PE. */
    for (int i = 0; i < 8; i++) { src64[i] = me * 10 + i; src32[i] = me * 10 + i; }
    shmem_barrier(0, 0, n, pSync);
    shmem_broadcast64(dst64, src64, 8, 0, 0, 0, n, pSync);
    shmem_barrier(0, 0, n, pSync);
    if (me != 0) for (int i = 0; i < 8; i++) CHECK(dst64[i] == i);
    shmem_barrier(0, 0, n, pSync); /* every PE checked dst64 before the next writes it */
    shmem_fcollect32(dst32, src32, 2, 0, 0, n, pSync);
    shmem_barrier(0, 0, n, pSync);
    for (int p = 0; p < n; p++) CHECK(dst32[2 * p] == p * 10 && dst32[2 * p + 1] == p * 10 + 1);
    shmem_collect64(dst64, src64, me + 1, 0, 0, n, pSync); /* PE p gives p+1 elements */
    shmem_barrier(0, 0, n, pSync);
    for (int p = 0, off = 0; p < n; off += p + 1, p++)
        for (int i = 0; i <= p; i++) CHECK(dst64[off + i] == p * 10 + i);
    shmem_barrier(0, 0, n, pSync);
    shmem_alltoall64(dst64, src64, 1, 0, 0, n, pSync);
    shmem_barrier(0, 0, n, pSync);
    for (int p = 0; p < n; p++) CHECK(dst64[p] == p * 10 + me);
    static long rs, rd;
    rs = me + 1;
    shmem_long_sum_to_all(&rd, &rs, 1, 0, 0, n, pWrk, pSync);
    CHECK(rd == (long)n * (n + 1) / 2);
    shmem_barrier(0, 0, n, pSync);
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) CHECK(pSync[i] == SHMEM_SYNC_VALUE);

    /* Locks on a static lock word guarding a static counter on PE 0. */
    for (int i = 0; i < 20; i++) {
        shmem_set_lock(&lock);
        long v = shmem_long_g(&shared_count, 0);
        shmem_long_p(&shared_count, v + 1, 0);
        shmem_quiet();
        shmem_clear_lock(&lock);
    }
    shmem_barrier_all();
    if (me == 0) CHECK(shared_count == 20L * n);

    /* Team collectives, long double through C, and a team of the even PEs. */
    long double *lds = shmem_malloc(2 * sizeof(long double)), *ldd = shmem_malloc(2 * sizeof(long double));
    lds[0] = me; lds[1] = 1;
    shmem_longdouble_sum_reduce(SHMEM_TEAM_WORLD, ldd, lds, 2);
    CHECK(ldd[0] == (long double)n * (n - 1) / 2 && ldd[1] == n);
    double *ds = shmem_malloc(n * sizeof(double)), *dd = shmem_malloc(n * sizeof(double));
    ds[0] = me;
    shmem_double_fcollect(SHMEM_TEAM_WORLD, dd, ds, 1);
    for (int p = 0; p < n; p++) CHECK(dd[p] == p);
    shmem_team_t even;
    int r = shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, (n + 1) / 2, NULL, 0, &even);
    CHECK(r == 0);
    if (me % 2 == 0) {
        CHECK(even != SHMEM_TEAM_INVALID && shmem_team_my_pe(even) == me / 2);
        shmem_ctx_t ctx;
        CHECK(shmem_team_create_ctx(even, 0, &ctx) == 0);
        shmem_team_t got;
        CHECK(shmem_ctx_get_team(ctx, &got) == 0 && got == even);
        /* PE numbers on a team's context are numbers in the team. */
        int tn = shmem_team_n_pes(even), tme = shmem_team_my_pe(even);
        shmem_ctx_long_p(ctx, &dst64[60], me + 100, (tme + 1) % tn);
        shmem_ctx_quiet(ctx);
        shmem_team_sync(even);
        CHECK(dst64[60] == 100 + shmem_team_translate_pe(even, (tme + tn - 1) % tn, SHMEM_TEAM_WORLD));
        CHECK(shmem_ctx_long_atomic_fetch(ctx, &dst64[60], (tme + 1) % tn) == me + 100);
        shmem_ctx_destroy(ctx);
        shmem_team_destroy(even);
    } else {
        CHECK(even == SHMEM_TEAM_INVALID);
    }

    /* Put with signal, strided, nbi, shmem_ptr. */
    int right = (me + 1) % n, left = (me + n - 1) % n;
    long *a = shmem_calloc(16, sizeof(long));
    long s[16];
    for (int i = 0; i < 16; i++) s[i] = me * 100 + i;
    shmem_barrier_all();
    shmem_long_iput(a, s, 2, 1, 8, right);
    shmem_long_put_signal(&a[1], &s[1], 1, &sig, 1, SHMEM_SIGNAL_ADD, right);
    shmem_signal_wait_until(&sig, SHMEM_CMP_EQ, 1);
    CHECK(a[1] == left * 100 + 1);
    shmem_barrier_all();
    for (int i = 0; i < 8; i++) CHECK(a[2 * i] == left * 100 + i);
    shmem_barrier_all(); /* checked before the right PE's gets and the left's next puts */
    long g[4];
    shmem_long_iget(g, a, 1, 2, 4, right);
    for (int i = 0; i < 4; i++) CHECK(g[i] == me * 100 + i);
    shmem_long_put_nbi(&a[8], s, 8, right);
    shmem_quiet();
    shmem_barrier_all();
    CHECK(a[15] == left * 100 + 7);
    long *p = shmem_ptr(a, right);
    if (p) CHECK(p[15] == me * 100 + 7);
    CHECK(shmem_ptr(a, me) == a);
    shmem_barrier_all();
    if (me == 0) printf("colls: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
