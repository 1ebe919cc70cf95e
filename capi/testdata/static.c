/* static: global and static variables (the program's data and bss) as the
 * targets of puts, gets, p and g, strided and nbi transfers, atomics,
 * signals, waits and a lock, whichever way the PEs reach each other's:
 * mapped on the host, or through the transports (tcp, cma) like the heap.
 * Several PEs hammer one static counter of PE 0 and the total must be
 * exact, while PE 0 computes in a loop without calling the library (the
 * operations must complete without it). */
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define ITERS 300

long global_init = 7; /* .data */
static long arr[16];  /* .bss, as the rest */
static long arr2[16];
static int ival;
static double dval;
static long counter;       /* PE 0's: every PE adds 1, ITERS times */
static long fcounter;      /* PE 0's: every PE fetch-adds 1, ITERS times */
static long fsum;          /* PE 0's: the sum of the values the fetch-adds got */
static int icounter;       /* PE 0's: 32-bit fetch-incs */
static unsigned long bits; /* PE 0's: every PE sets its bit */
static long cswap_word;    /* PE 0's: one PE wins the compare-and-swap */
static long winners;
static long swapped;
static uint64_t sig;  /* put-with-signal */
static uint64_t sig2; /* PE 0's: signal_add from every PE */
static long flag;
static long lock;
static long locked_total; /* PE 0's: incremented under the lock */
static long fetched_nbi;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
    long *h = shmem_calloc(16, sizeof(long));
    CHECK(h != NULL);

    /* Put and get, p and g, on bss and data. */
    long src[16], got[16];
    for (int i = 0; i < 16; i++) src[i] = me * 1000 + i;
    shmem_long_put(arr, src, 16, right);
    shmem_int_p(&ival, me + 1, right);
    shmem_double_p(&dval, me + 0.5, right);
    shmem_barrier_all();
    for (int i = 0; i < 16; i++) CHECK(arr[i] == left * 1000 + i);
    CHECK(ival == left + 1 && dval == left + 0.5);
    shmem_long_get(got, arr, 16, right);
    for (int i = 0; i < 16; i++) CHECK(got[i] == me * 1000 + i);
    CHECK(shmem_int_g(&ival, right) == me + 1);
    CHECK(shmem_long_g(&global_init, right) == 7);
    CHECK(shmem_addr_accessible(&counter, right));
    /* A peer's static data is mapped exactly where its heap is, unless
     * GOSHMEM_STATIC_DATA=0 leaves it in place (then the transports reach
     * it: cma and tcp on this host). */
    const char *sd = getenv("GOSHMEM_STATIC_DATA");
    int shared = !(sd && strcmp(sd, "0") == 0);
    if (right != me) CHECK((shmem_ptr(arr, right) != NULL) == (shared && shmem_ptr(h, right) != NULL));
    CHECK(shmem_ptr(arr, me) == (void *)arr);

    /* Strided and nbi. */
    shmem_long_iput(arr2, src, 2, 1, 8, right);
    shmem_long_put_nbi(&arr2[1], &src[8], 1, right);
    shmem_quiet();
    shmem_barrier_all();
    for (int i = 0; i < 8; i++) CHECK(arr2[2 * i] == left * 1000 + i);
    CHECK(arr2[1] == left * 1000 + 8);
    long sg[4];
    shmem_long_iget(sg, arr2, 1, 4, 4, right);
    for (int i = 0; i < 4; i++) CHECK(sg[i] == me * 1000 + 2 * i);
    long nb = -1;
    shmem_long_get_nbi(&nb, &arr2[1], 1, right);
    shmem_quiet();
    CHECK(nb == me * 1000 + 8);
    shmem_barrier_all();

    /* Atomics: every PE hammers PE 0's counters; PE 0 adds too, then
     * computes until the total is there, calling nothing. */
    long mysum = 0;
    for (int i = 0; i < ITERS; i++) {
        shmem_long_atomic_add(&counter, 1, 0);
        mysum += shmem_long_atomic_fetch_add(&fcounter, 1, 0);
        shmem_int_atomic_fetch_inc(&icounter, 0);
    }
    shmem_long_atomic_add(&fsum, mysum, 0);
    shmem_ulong_atomic_fetch_or(&bits, 1UL << me, 0);
    if (shmem_long_atomic_compare_swap(&cswap_word, 0, me + 1, 0) == 0) shmem_long_atomic_inc(&winners, 0);
    shmem_long_atomic_fetch_nbi(&fetched_nbi, &global_init, right);
    shmem_quiet();
    CHECK(fetched_nbi == 7);
    if (me == 0) {
        long total = (long)n * ITERS;
        volatile unsigned long spins = 0;
        while (__atomic_load_n(&counter, __ATOMIC_ACQUIRE) != total || __atomic_load_n(&fsum, __ATOMIC_ACQUIRE) != total * (total - 1) / 2 ||
               __atomic_load_n(&winners, __ATOMIC_ACQUIRE) != 1 || __atomic_load_n(&bits, __ATOMIC_ACQUIRE) != (1UL << n) - 1)
            spins++;
        CHECK(fcounter == total && icounter == (int)total);
        CHECK(cswap_word >= 1 && cswap_word <= n);
    }
    shmem_barrier_all();
    CHECK(shmem_long_atomic_fetch(&counter, 0) == (long)n * ITERS);
    long old = shmem_long_atomic_swap(&swapped, me + 1, right);
    CHECK(old == 0);
    shmem_barrier_all();
    CHECK(swapped == left + 1);
    shmem_barrier_all();
    shmem_long_atomic_set(&swapped, 0, right);
    shmem_barrier_all();
    CHECK(swapped == 0);

    /* Signals: data into the right PE's static array, the signal in its
     * static word; and a data put to the heap signalled in static data. */
    shmem_long_put_signal(arr2, src, 16, &sig, 1, SHMEM_SIGNAL_SET, right);
    CHECK(shmem_signal_wait_until(&sig, SHMEM_CMP_EQ, 1) == 1);
    for (int i = 0; i < 16; i++) CHECK(arr2[i] == left * 1000 + i);
    shmem_barrier_all();
    shmem_long_put_signal(h, src, 16, &sig, 1, SHMEM_SIGNAL_ADD, right);
    shmem_signal_wait_until(&sig, SHMEM_CMP_EQ, 2);
    for (int i = 0; i < 16; i++) CHECK(h[i] == left * 1000 + i);
    shmem_signal_add(&sig2, 1, 0);
    if (me == 0) CHECK(shmem_signal_wait_until(&sig2, SHMEM_CMP_GE, n) == (uint64_t)n);

    /* wait_until on a static variable a peer sets. */
    shmem_long_atomic_set(&flag, 1, right);
    shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 1);
    shmem_barrier_all();

    /* A lock in static data guarding a read-modify-write of PE 0's. */
    for (int i = 0; i < 10; i++) {
        shmem_set_lock(&lock);
        long v = shmem_long_g(&locked_total, 0);
        shmem_long_p(&locked_total, v + 1, 0);
        shmem_quiet();
        shmem_clear_lock(&lock);
    }
    shmem_barrier_all();
    if (me == 0) CHECK(locked_total == 10L * n);
    shmem_barrier_all();
    if (me == 0) printf("static: PASS on %d PEs\n", n);
    shmem_finalize();
    return 0;
}
