/* threads: shmem_init_thread(SHMEM_THREAD_MULTIPLE), then threads that
 * put, get and do atomics at once, half of them on contexts of their own,
 * on the heap and on static data. */
#include <pthread.h>
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"

enum { NT = 4, ITERS = 500, BLOCK = 8 };

static long counter;            /* on PE 0: every thread of every PE adds to it */
static long slots[NT * BLOCK];  /* thread t of the left PE puts block t here */
static uint64_t arrived;        /* the left PE's threads add 1 each when their block is here */
static long *heap;              /* NT * BLOCK longs in the symmetric heap, as slots */
static int me, npes, right, left;

static void *work(void *arg) {
    int t = (int)(intptr_t)arg;
    shmem_ctx_t ctx = SHMEM_CTX_DEFAULT;
    if (t % 2) CHECK(shmem_ctx_create(t == 1 ? SHMEM_CTX_PRIVATE : 0, &ctx) == 0);
    long src[BLOCK], got[BLOCK];
    for (int k = 0; k < BLOCK; k++) src[k] = me * 1000 + t * 10 + k;
    for (int i = 0; i < ITERS; i++) {
        shmem_ctx_long_atomic_inc(ctx, &counter, 0);
        shmem_ctx_long_atomic_fetch_add(ctx, &heap[NT * BLOCK], 1, 0);
        shmem_ctx_long_put(ctx, &slots[t * BLOCK], src, BLOCK, right);
        shmem_ctx_long_put_nbi(ctx, &heap[t * BLOCK], src, BLOCK, right);
        shmem_ctx_long_get(ctx, got, &heap[t * BLOCK], BLOCK, me);
    }
    shmem_ctx_quiet(ctx);
    shmem_ctx_uint64_atomic_add(ctx, &arrived, 1, right);
    if (ctx != SHMEM_CTX_DEFAULT) shmem_ctx_destroy(ctx);
    return NULL;
}

int main(void) {
    int provided = -1;
    CHECK(shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) == 0);
    CHECK(provided == SHMEM_THREAD_MULTIPLE);
    int q = -1;
    shmem_query_thread(&q);
    CHECK(q == SHMEM_THREAD_MULTIPLE);
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;
    heap = shmem_calloc(NT * BLOCK + 1, sizeof(long));
    CHECK(heap != NULL);
    shmem_barrier_all();
    pthread_t th[NT];
    for (int t = 0; t < NT; t++) CHECK(pthread_create(&th[t], NULL, work, (void *)(intptr_t)t) == 0);
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    shmem_uint64_wait_until(&arrived, SHMEM_CMP_EQ, NT);
    for (int t = 0; t < NT; t++)
        for (int k = 0; k < BLOCK; k++) {
            CHECK(slots[t * BLOCK + k] == left * 1000 + t * 10 + k);
            CHECK(heap[t * BLOCK + k] == left * 1000 + t * 10 + k);
        }
    shmem_barrier_all();
    if (me == 0) CHECK(counter == (long)NT * ITERS * npes && heap[NT * BLOCK] == counter);
    shmem_barrier_all();
    if (me == 0) printf("threads: PASS on %d PEs\n", npes);
    shmem_finalize();
    return 0;
}
