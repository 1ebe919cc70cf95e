/* The OSHMEM side of BenchmarkStartup: the same steps as the "hello" mode
 * of testdata/pe (init, one atomic per PE on PE 0, barrier, finalize), and
 * the same "stats PE init_ms rss_kb" line, printed before shmem_finalize
 * (Debian's Open MPI 4.1.4 OSHMEM crashes inside it; see ANCHORS.md).
 *
 *   oshcc -O2 -o oshmem_hello oshmem_hello.c
 *   oshrun --allow-run-as-root --oversubscribe -np 8 ./oshmem_hello
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

int main(void) {
    double start = now_ms();
    shmem_init();
    double init = now_ms() - start;
    int me = shmem_my_pe(), n = shmem_n_pes();
    char host[256] = "";
    gethostname(host, sizeof host);
    printf("hello %d of %d on %s\n", me, n, host);
    static long count = 0;
    shmem_long_atomic_inc(&count, 0);
    shmem_barrier_all();
    if (me == 0 && count != n) {
        fprintf(stderr, "PE 0 counted %ld arrivals, want %d\n", count, n);
        return 1;
    }
    printf("stats %d %.1f %ld\n", me, init, peak_rss_kb());
    fflush(stdout);
    shmem_finalize();
    return 0;
}
