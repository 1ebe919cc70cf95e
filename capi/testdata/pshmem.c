/* pshmem: the profiling interface. The program defines its own shmem_
 * routines, tool wrappers that count their calls and call the library's
 * through pshmem_: with the shared library and with the static one, they
 * must replace the library's (the static link fails if the library's are
 * not weak), see exactly the program's calls (not the library's own, made
 * inside the collectives below) and do what the routines do. The wrapped
 * routines are of every kind the library defines: untyped and typed C
 * (shmem_putmem, shmem_getmem, shmem_quiet, shmem_long_p,
 * shmem_long_atomic_add) and those Go defines (shmem_malloc,
 * shmem_barrier_all, shmem_team_sync, shmem_team_my_pe). */
#include <pshmem.h>
#include <shmem.h>
#include <stdio.h>

#include "check.h"

enum { PUTMEM, GETMEM, QUIET, LONG_P, LONG_ADD, MALLOC, BARRIER_ALL, TEAM_SYNC, TEAM_MY_PE, NCOUNT };
static const char *names[NCOUNT] = {"shmem_putmem", "shmem_getmem", "shmem_quiet", "shmem_long_p", "shmem_long_atomic_add",
                                    "shmem_malloc", "shmem_barrier_all", "shmem_team_sync", "shmem_team_my_pe"};
static long counts[NCOUNT]; /* the wrappers' counts (private: not used remotely) */

void shmem_putmem(void *dest, const void *source, size_t nelems, int pe) {
    counts[PUTMEM]++;
    pshmem_putmem(dest, source, nelems, pe);
}
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe) {
    counts[GETMEM]++;
    pshmem_getmem(dest, source, nelems, pe);
}
void shmem_quiet(void) {
    counts[QUIET]++;
    pshmem_quiet();
}
void shmem_long_p(long *dest, long value, int pe) {
    counts[LONG_P]++;
    pshmem_long_p(dest, value, pe);
}
void shmem_long_atomic_add(long *dest, long value, int pe) {
    counts[LONG_ADD]++;
    pshmem_long_atomic_add(dest, value, pe);
}
void *shmem_malloc(size_t size) {
    counts[MALLOC]++;
    return pshmem_malloc(size);
}
void shmem_barrier_all(void) {
    counts[BARRIER_ALL]++;
    pshmem_barrier_all();
}
int shmem_team_sync(shmem_team_t team) {
    counts[TEAM_SYNC]++;
    return pshmem_team_sync(team);
}
int shmem_team_my_pe(shmem_team_t team) {
    counts[TEAM_MY_PE]++;
    return pshmem_team_my_pe(team);
}

static long sa[8], sb[8], total, pWrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
/* One work array per active-set call, so that none is reused while another
 * PE may still be in the call before. */
static long pSync[4][SHMEM_SYNC_SIZE];
static long sum, counter;

int main(void) {
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < SHMEM_SYNC_SIZE; i++) pSync[k][i] = SHMEM_SYNC_VALUE;
    shmem_init();
    shmem_pcontrol(1); /* a no-op here, in both forms */
    pshmem_pcontrol(0);
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
    CHECK(n <= 8);
    long *h = shmem_malloc(2 * sizeof(long));
    long want[NCOUNT] = {0};
    want[MALLOC] = 1;
    h[0] = h[1] = -1;
    shmem_barrier_all();
    long v = me * 10 + 1;
    shmem_putmem(&h[0], &v, sizeof v, right);
    shmem_long_p(&h[1], me * 10 + 2, right);
    shmem_quiet();
    shmem_long_atomic_add(&counter, 1, 0);
    shmem_barrier_all();
    want[PUTMEM] = want[LONG_P] = want[QUIET] = want[LONG_ADD] = 1;
    want[BARRIER_ALL] = 2;
    CHECK(h[0] == left * 10 + 1 && h[1] == left * 10 + 2);
    if (me == 0) CHECK(counter == n);
    long g = 0;
    shmem_getmem(&g, &h[0], sizeof g, right);
    want[GETMEM] = 1;
    CHECK(g == me * 10 + 1);

    /* Collectives that the library builds on its own RMA, atomics, quiet
     * and team calls: the wrappers must not see those. */
    sa[0] = me + 1;
    shmem_long_sum_to_all(&total, &sa[0], 1, 0, 0, n, pWrk, pSync[0]);
    CHECK(total == (long)n * (n + 1) / 2);
    shmem_barrier(0, 0, n, pSync[1]);
    shmem_fcollect64(sb, sa, 1, 0, 0, n, pSync[2]);
    for (int i = 0; i < n; i++) CHECK(sb[i] == i + 1);
    shmem_barrier(0, 0, n, pSync[3]);
    CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, &sum, &sa[0], 1) == 0);
    CHECK(sum == (long)n * (n + 1) / 2);
    CHECK(shmem_fcollectmem(SHMEM_TEAM_WORLD, sb, sa, sizeof(long)) == 0);
    for (int i = 0; i < n; i++) CHECK(sb[i] == i + 1);
    shmem_ctx_t ctx;
    CHECK(shmem_team_create_ctx(SHMEM_TEAM_WORLD, 0, &ctx) == 0);
    shmem_ctx_destroy(ctx);

    /* The program's own call of each Go-defined routine goes through its
     * wrapper too. */
    CHECK(shmem_team_my_pe(SHMEM_TEAM_WORLD) == me);
    CHECK(shmem_team_sync(SHMEM_TEAM_WORLD) == 0);
    want[TEAM_MY_PE] = want[TEAM_SYNC] = 1;
    for (int i = 0; i < NCOUNT; i++) {
        if (counts[i] != want[i]) fprintf(stderr, "PE %d: %s: %ld calls seen, want %ld\n", me, names[i], counts[i], want[i]);
        CHECK(counts[i] == want[i]);
    }
    pshmem_barrier_all();
    if (me == 0) printf("pshmem: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
