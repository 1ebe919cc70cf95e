/* mixed: the C side of a job whose odd PEs are a Go program (the test
 * binary, goPE in capi_test.go, doing the same steps): puts, gets,
 * atomics and a reduction between C and Go PEs, on the symmetric heap
 * (the only memory the two programs share: static data is a program's). */
#include <shmem.h>
#include <stdio.h>

#include "check.h"

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    long *x = shmem_calloc(8, sizeof(long)), *s = shmem_malloc(sizeof(long)), *d = shmem_malloc(sizeof(long));
    CHECK(x && s && d && n <= 7);
    for (int p = 0; p < n; p++) shmem_long_p(&x[me], me + 1, p);
    shmem_long_atomic_add(&x[7], me, 0);
    shmem_barrier_all();
    for (int p = 0; p < n; p++) CHECK(x[p] == p + 1);
    if (me == 0) CHECK(x[7] == (long)n * (n - 1) / 2);
    CHECK(shmem_long_g(&x[(me + 1) % n], (me + 1) % n) == (me + 1) % n + 1);
    *s = me;
    CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, d, s, 1) == 0 && *d == (long)n * (n - 1) / 2);
    shmem_barrier_all();
    if (me == 0) printf("mixed: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
