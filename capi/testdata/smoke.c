/* smoke: RMA, atomics, static data, wait and a collective on 2+ PEs. */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static long counter;
static long sdata[4];
static int flag;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n;
    long *h = shmem_malloc(8 * sizeof(long));
    for (int i = 0; i < 8; i++) h[i] = -1;
    shmem_barrier_all();
    long src[8];
    for (int i = 0; i < 8; i++) src[i] = me * 100 + i;
    shmem_long_put(h, src, 8, right);
    shmem_barrier_all();
    int left = (me + n - 1) % n;
    for (int i = 0; i < 8; i++) CHECK(h[i] == left * 100 + i);
    CHECK(shmem_long_g(&h[3], right) == me * 100 + 3);
    shmem_long_atomic_add(&counter, 1, 0);
    shmem_long_p(&sdata[me % 4], me + 1, right);
    shmem_barrier_all();
    if (me == 0) CHECK(counter == n);
    CHECK(sdata[left % 4] == left + 1);
    long old = shmem_long_atomic_fetch_add(&h[0], 5, right);
    (void)old;
    shmem_int_atomic_set(&flag, 1, right);
    shmem_int_wait_until(&flag, SHMEM_CMP_EQ, 1);
    long sum;
    long *sd = shmem_malloc(sizeof(long)), *ss = shmem_malloc(sizeof(long));
    *ss = me;
    shmem_long_sum_reduce(SHMEM_TEAM_WORLD, sd, ss, 1);
    sum = *sd;
    CHECK(sum == (long)n * (n - 1) / 2);
    shmem_barrier_all();
    if (me == 0) printf("smoke: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
