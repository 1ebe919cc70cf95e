/* statcoll: what the specification allows and programs do that goshmem
 * got wrong: team collectives on global and static variables (symmetric
 * in C), on a team and on every PE, in place too; collectives of nothing
 * with NULL arrays; transfers of nothing at NULL; shmem_test_any's
 * fairness; hints the library does not know. */
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#define MAXPES 16

static long bsrc[4], bdst[4];
static int fsrc[2], fdst[2 * MAXPES];
static long csrc[MAXPES], cdst[MAXPES * (MAXPES + 1) / 2];
static short asrc[MAXPES], adst[MAXPES];
static double ssrc[2 * MAXPES], sdst[3 * MAXPES];
static long rbuf[3], rdst[3];
static int flags[MAXPES];
static int me, n;

/* statics: team collectives on static data, on every PE and on a team,
 * in place too, and with a heap source. */
static void statics(void) {
    for (int i = 0; i < 4; i++) bsrc[i] = 100 * me + i;
    fsrc[0] = me, fsrc[1] = -me;
    for (int i = 0; i <= me; i++) csrc[i] = 10 * me + i;
    for (int p = 0; p < n; p++) asrc[p] = (short)(100 * me + p);
    for (int i = 0; i < 2 * n; i++) ssrc[i] = me + i / 10.0;
    for (int i = 0; i < 3; i++) rbuf[i] = me + i;
    shmem_barrier_all();

    int root = n - 1;
    CHECK(shmem_long_broadcast(SHMEM_TEAM_WORLD, bdst, bsrc, 4, root) == 0);
    for (int i = 0; i < 4; i++) CHECK(bdst[i] == 100 * root + i);
    CHECK(shmem_int_fcollect(SHMEM_TEAM_WORLD, fdst, fsrc, 2) == 0);
    for (int p = 0; p < n; p++) CHECK(fdst[2 * p] == p && fdst[2 * p + 1] == -p);
    CHECK(shmem_long_collect(SHMEM_TEAM_WORLD, cdst, csrc, (size_t)me + 1) == 0);
    for (int p = 0, off = 0; p < n; off += p + 1, p++)
        for (int i = 0; i <= p; i++) CHECK(cdst[off + i] == 10 * p + i);
    CHECK(shmem_short_alltoall(SHMEM_TEAM_WORLD, adst, asrc, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(adst[p] == 100 * p + me);
    /* Element k of the block of PE p: source index (me*1 + k)*2, dest
     * index (p*1 + k)*3, one element per PE. */
    CHECK(shmem_double_alltoalls(SHMEM_TEAM_WORLD, sdst, ssrc, 3, 2, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(sdst[3 * p] == p + (2 * me) / 10.0);
    CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, rdst, rbuf, 3) == 0);
    for (int i = 0; i < 3; i++) CHECK(rdst[i] == (long)n * (n - 1) / 2 + (long)n * i);
    CHECK(shmem_long_max_reduce(SHMEM_TEAM_WORLD, rbuf, rbuf, 3) == 0); /* in place */
    for (int i = 0; i < 3; i++) CHECK(rbuf[i] == n - 1 + i);
    CHECK(shmem_long_sum_inscan(SHMEM_TEAM_WORLD, rdst, bsrc, 1) == 0);
    CHECK(rdst[0] == 100L * me * (me + 1) / 2);
    rdst[0] = -1;
    CHECK(shmem_long_sum_exscan(SHMEM_TEAM_WORLD, rdst, bsrc, 1) == 0); /* PE 0 gets 0 */
    CHECK(rdst[0] == 100L * me * (me - 1) / 2);
    /* A static dest and a heap source. */
    long *hsrc = shmem_malloc(4 * sizeof(long));
    for (int i = 0; i < 4; i++) hsrc[i] = 7 * me + i;
    CHECK(shmem_long_fcollect(SHMEM_TEAM_WORLD, cdst, hsrc, 1) == 0);
    for (int p = 0; p < n; p++) CHECK(cdst[p] == 7 * p);

    /* A team of the odd PEs (those PEs number from 0 in it). */
    shmem_team_t odd = SHMEM_TEAM_INVALID;
    if (n >= 2) {
        shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, n / 2, NULL, 0, &odd);
        if (odd != SHMEM_TEAM_INVALID) {
            int tn = shmem_team_n_pes(odd), tme = shmem_team_my_pe(odd);
            CHECK(shmem_long_broadcast(odd, bdst, bsrc, 4, 0) == 0);
            for (int i = 0; i < 4; i++) CHECK(bdst[i] == 100 + i);
            CHECK(shmem_long_collect(odd, cdst, csrc, (size_t)me + 1) == 0);
            for (int t = 0, off = 0; t < tn; t++) {
                int p = 2 * t + 1;
                for (int i = 0; i <= p; i++) CHECK(cdst[off + i] == 10 * p + i);
                off += p + 1;
            }
            CHECK(tme == me / 2);
            shmem_team_destroy(odd);
        }
    }

    shmem_free(hsrc);
}

/* emptycoll: collectives of nothing with NULL arrays. */
static void emptycoll(void) {
    CHECK(shmem_int_collect(SHMEM_TEAM_WORLD, NULL, NULL, 0) == 0);
    CHECK(shmem_int_broadcast(SHMEM_TEAM_WORLD, NULL, NULL, 0, 0) == 0);
    CHECK(shmem_int_fcollect(SHMEM_TEAM_WORLD, NULL, NULL, 0) == 0);
}

/* emptyrma: transfers of nothing, at NULL. */
static void emptyrma(void) {
    shmem_putmem(NULL, NULL, 0, (me + 1) % n);
    shmem_getmem(NULL, NULL, 0, (me + 1) % n);
    shmem_long_put_nbi(NULL, NULL, 0, (me + 1) % n);
    shmem_quiet();
}

/* any: with every flag set, a series of shmem_test_any calls returns each
 * index. */
static void any(void) {
    for (int p = 0; p < n; p++) shmem_int_atomic_set(&flags[me], 1, p);
    shmem_barrier_all();
    int seen[MAXPES] = {0}, distinct = 0;
    for (int tries = 0; tries < 100 * n && distinct < n; tries++) {
        size_t i = shmem_int_test_any(flags, (size_t)n, NULL, SHMEM_CMP_EQ, 1);
        CHECK(i < (size_t)n);
        if (!seen[i]++) distinct++;
    }
    CHECK(distinct == n);
}

/* hints: a hint the library does not know is advice it may ignore. */
static void hints(void) {
    long *h = shmem_malloc_with_hints(64, ~SHMEM_MALLOC_ATOMICS_REMOTE);
    CHECK(h != NULL);
    shmem_free(h);
}

/* sosnames: the shmemx_ names of Sandia OpenSHMEM for 1.6 routines. */
static void sosnames(void) {
    static long one = 1, sum;
    static uint64_t sig;
    shmemx_long_sum_inscan(SHMEM_TEAM_WORLD, &sum, &one, 1);
    CHECK(sum == me + 1);
    shmemx_signal_add(&sig, 2, (me + 1) % n);
    shmem_fence(); /* the set lands after the add */
    shmemx_signal_set(SHMEM_CTX_DEFAULT, &sig, 5, (me + 1) % n);
    shmem_barrier_all();
    CHECK(shmem_signal_fetch(&sig) == 5);
    CHECK(shmem_team_n_pes(SHMEMX_TEAM_NODE) >= 1);
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        void (*run)(void);
    } parts[] = {{"statics", statics}, {"emptycoll", emptycoll}, {"emptyrma", emptyrma}, {"any", any}, {"hints", hints}, {"sosnames", sosnames}};
    shmem_init();
    me = shmem_my_pe(), n = shmem_n_pes();
    CHECK(n <= MAXPES);
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (argc < 2 || strcmp(argv[1], parts[i].name) == 0) parts[i].run();
    shmem_barrier_all();
    if (me == 0) printf("statcoll: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
