/* netwait: the waits of C on local memory, with the PEs reached through
 * tcp: a ping-pong of puts and shmem_wait_until, one of puts and a loop
 * of shmem_test, and the active-set barrier (its counters are waited on
 * in C). Run with UCX_TCP_PASSIVE_DELAY at its longest (10s), a wait
 * that does not drive progress itself sees the put it waits for only when
 * tcp's passive progress steps in, 10s later: the 20 rounds of 3 such
 * hops and more outlast the test's timeout by far. */
#include <shmem.h>
#include <stdio.h>

#include "check.h"

static long ping, pong;
static long psync[SHMEM_BARRIER_SYNC_SIZE];

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++) psync[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();
    for (long i = 1; i <= 20; i++) {
        if (me == 0) {
            shmem_long_p(&ping, i, 1);
            shmem_long_wait_until(&pong, SHMEM_CMP_EQ, i);
        } else if (me == 1) {
            shmem_long_wait_until(&ping, SHMEM_CMP_EQ, i);
            shmem_long_p(&pong, i, 0);
            while (!shmem_long_test(&ping, SHMEM_CMP_EQ, -i)) {
            }
        }
        if (me == 0) shmem_long_p(&ping, -i, 1);
        shmem_barrier(0, 0, n, psync);
    }
    CHECK(me > 1 || (me == 0 ? pong : -ping) == 20);
    shmem_barrier_all();
    if (me == 0) printf("netwait: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
