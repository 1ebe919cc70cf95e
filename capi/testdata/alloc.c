/* alloc: shmem_align and shmemalign with every power of two from 64 MiB
 * down to 4 KiB (tests-sos's shmemalign asks for 8 MiB), run with a heap of
 * 128 MiB (SHMEM_SYMMETRIC_SIZE=128M): each block is aligned here and lies
 * at the same offset on every PE (a PE's put to its neighbour's block
 * lands in it); an alignment the heap cannot honour gives NULL, never a
 * misaligned block: its size (only offset 0 has it, and the library's
 * state is there), twice its size, and one that is not a power of two. */
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"

#define HEAP (128L << 20)

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
    long *ref = shmem_malloc(sizeof(long));
    CHECK(ref != NULL);
    long *blocks[32];
    size_t aligns[32];
    int k = 0;
    /* From the largest down, so that each finds its boundary free. */
    for (size_t a = 64L << 20; a >= 4096; a /= 2, k++) {
        long *b = k % 2 ? shmemalign(a, 3 * sizeof(long)) : shmem_align(a, 3 * sizeof(long));
        CHECK(b != NULL);
        CHECK((uintptr_t)b % a == 0);
        blocks[k] = b;
        aligns[k] = a;
        shmem_long_p(b, (long)((char *)b - (char *)ref), right);
    }
    shmem_barrier_all();
    for (int i = 0; i < k; i++) {
        long rel = (long)((char *)blocks[i] - (char *)ref);
        if (blocks[i][0] != rel)
            fprintf(stderr, "PE %d: the block aligned to %zu is %ld bytes after ref here, %ld on PE %d\n", me, aligns[i], rel,
                    blocks[i][0], left);
        CHECK(blocks[i][0] == rel);
    }
    CHECK(shmem_align(HEAP, 8) == NULL);
    CHECK(shmem_align(2 * HEAP, 8) == NULL);
    CHECK(shmem_align(3 << 12, 8) == NULL);
    CHECK(shmemalign(2 * HEAP, 8) == NULL);
    for (int i = 0; i < k; i++) shmem_free(blocks[i]);
    shmem_free(ref);
    shmem_barrier_all();
    if (me == 0) printf("alloc: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
