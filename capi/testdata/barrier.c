/* barrier: shmem_barrier_all and shmem_sync_all, which run in C where the
 * PEs map each other's heaps and in Go otherwise, interleaved with
 * barriers that always run in Go (those of shmem_malloc and shmem_free),
 * on any number of PEs. Each iteration every PE puts the iteration's
 * number to its right neighbour's slot and checks its left neighbour's
 * after the barrier: a barrier that let a PE through early, or counted
 * differently from Go's, fails a check or hangs. With the argument
 * "mismatch", PE 0 calls shmem_barrier_all where the others call
 * shmem_sync_all: the job must end, reporting the mismatch. */
#include <shmem.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static long slot;

int main(int argc, char **argv) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n;
    if (argc > 1 && strcmp(argv[1], "mismatch") == 0) {
        shmem_barrier_all();
        if (me == 0)
            shmem_barrier_all();
        else
            shmem_sync_all();
        fprintf(stderr, "PE %d: passed a mismatched barrier\n", me);
        shmem_finalize();
        return 1;
    }
    long *h = shmem_calloc(1, sizeof(long));
    for (long i = 1; i <= 3000; i++) {
        shmem_long_p(h, i, right);
        shmem_long_p(&slot, -i, right);
        if (i % 2) {
            shmem_barrier_all();
        } else {
            shmem_quiet();
            shmem_sync_all();
        }
        CHECK(*h == i);
        CHECK(slot == -i);
        /* Nobody writes again before every PE checked. */
        shmem_sync_all();
        if (i % 97 == 0) {
            long *x = shmem_malloc(64);
            CHECK(x != NULL);
            shmem_free(x);
        }
    }
    shmem_free(h);
    shmem_barrier_all();
    if (me == 0) printf("barrier: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
