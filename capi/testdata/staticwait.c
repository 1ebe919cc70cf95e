/* staticwait: PEs that wait in C (shmem_wait_until, a shmem_test loop,
 * shmem_wait_until_all, shmem_signal_wait_until) on their static data for
 * atomics and signals of other PEs. Where the static data is left in place
 * (GOSHMEM_STATIC_DATA=0) and UCX_TLS leaves tcp out, the PEs of a host
 * carry those in shared-memory messages that the waiting PE applies only
 * inside the library: the C waiting loops must serve them, or every PE
 * waits forever. */
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"

static long flag;
static long counter;     /* PE 0's: every other PE fetch-adds 1 */
static long flags[4];    /* PE 0's: PE i sets flags[i % 4] */
static uint64_t sig;     /* the right neighbour's signal */
static long buf[8];      /* the right neighbour's data */
static int tested;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;

    /* A ring of atomic sets, each PE waiting for its own. */
    shmem_long_atomic_set(&flag, 1, right);
    shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 1);

    /* Fetching atomics to PE 0 while it waits for their total. */
    if (me != 0) {
        long old = shmem_long_atomic_fetch_add(&counter, 1, 0);
        CHECK(old >= 0 && old < n - 1);
        shmem_long_atomic_set(&flags[me % 4], 1, 0);
    } else {
        shmem_long_wait_until(&counter, SHMEM_CMP_EQ, n - 1);
        int status[4] = {1, 0, 0, 0}; /* PE 0 sets none of its own */
        for (int i = n; i < 4; i++) status[i] = 1;
        shmem_long_wait_until_all(flags, 4, status, SHMEM_CMP_EQ, 1);
    }

    /* A test loop, then put-with-signal into static data. */
    shmem_int_atomic_set(&tested, 7, right);
    while (!shmem_int_test(&tested, SHMEM_CMP_EQ, 7)) {
    }
    long src[8];
    for (int i = 0; i < 8; i++) src[i] = me * 10 + i;
    shmem_long_put_signal(buf, src, 8, &sig, 1, SHMEM_SIGNAL_ADD, right);
    CHECK(shmem_signal_wait_until(&sig, SHMEM_CMP_EQ, 1) == 1);
    for (int i = 0; i < 8; i++) CHECK(buf[i] == left * 10 + i);

    shmem_barrier_all();
    if (me == 0) printf("staticwait: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
