/* osu_oshm: the loops of benchmarks/osu, written against a C OpenSHMEM 1.4
 * (built with oshcc), so that goshmem and the reference implementation are
 * measured by the same program logic on the same machine.
 *
 *   oshcc -O2 -o osu_oshm osu_oshm.c
 *   oshrun -np 2 ./osu_oshm TEST [-min B] [-max B] [-iters N] [-warmup N] [-precision D] [-settle-ms MS]
 *
 * TEST is one of put get put_nb get_nb put_bw get_bw put_mr atomics barrier
 * broadcast collect fcollect reduce alltoall. Each prints the table that
 * `osu TEST` prints (same title, columns and row keys), so the two outputs
 * feed `osu compare` directly. The loops, iteration counts and sizes are
 * those of benchmarks/osu (which follow the OSU 5.x osu_oshm_* programs):
 * point-to-point tests pair PE i < n/2 with PE i + n/2 and report the
 * senders' mean; collectives time each call on every PE with a barrier
 * after it, outside the timing, and report the mean over the PEs.
 * This file is not part of the Go build (the directory has no Go files). */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct opts {
    long min, max, iters, warmup, iters_large, warmup_large, large, window;
    int precision;
    double settle_ms;
};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int me, npes;
static double *stats; /* npes x 2 doubles on every PE, read on PE 0 */

/* gather2 collects two values of every PE on PE 0, as the Go suite's gather. */
static void gather2(double a, double b) {
    double v[2] = {a, b};
    shmem_barrier_all();
    shmem_double_put(&stats[2 * me], v, 2, 0);
    shmem_barrier_all();
}

/* senders_sum returns the sum of column col of the gathered values of the
 * sending PEs 0..pairs-1. */
static double senders_sum(int pairs, int col) {
    double sum = 0;
    for (int p = 0; p < pairs; p++)
        sum += stats[2 * p + col];
    return sum;
}

/* refill sets the first size bytes of the buffers of a pair test, then
 * waits for every PE. */
static void refill(char *s, char *r, long size) {
    memset(s, 'a', size);
    memset(r, 'b', size);
    shmem_barrier_all();
}

/* settle runs barriers for at least ms milliseconds by PE 0's clock before
 * the first timing, as `osu -settle` does (there for the Go runtime's
 * start-up; here so that both sides run the same program). */
static void settle(double ms) {
    static long stop; /* symmetric: a global */
    double t0 = now_us();
    while (ms > 0) {
        for (int i = 0; i < 1000; i++)
            shmem_barrier_all();
        if (me == 0 && now_us() - t0 >= ms * 1e3)
            for (int p = 0; p < npes; p++)
                shmem_long_p(&stop, 1, p);
        shmem_barrier_all();
        if (stop)
            break;
    }
}

static void loops(const struct opts *o, long size, long *iters, long *warm) {
    if (size > o->large) {
        *iters = o->iters_large;
        *warm = o->warmup_large;
    } else {
        *iters = o->iters;
        *warm = o->warmup;
    }
}

static void row(const struct opts *o, long size, double v) {
    if (me == 0)
        printf("%-20ld%20.*f\n", size, o->precision, v);
}

/* PE i < n/2 works on PE i + n/2. put, get, put_nb, get_nb: each iteration
 * one transfer (and a quiet for put and the non-blocking ones), latency
 * averaged over the senders. put_bw, get_bw: each iteration a window of
 * non-blocking transfers and one quiet, MB/s summed over the senders. */
static void run_pt2pt(const char *name, const struct opts *o) {
    char *s = shmem_malloc(o->max), *r = shmem_malloc(o->max);
    int pairs = npes / 2, peer = me < pairs ? me + pairs : me - pairs;
    int bw = strstr(name, "_bw") != NULL, get = name[0] == 'g';
    int kind = get + 2 * (name[3] == '_' && !bw); /* put get put_nb get_nb */
    const char *title = bw ? (get ? "OSU OpenSHMEM Get Bandwidth Test" : "OSU OpenSHMEM Put Bandwidth Test")
                        : !strcmp(name, "put") ? "OSU OpenSHMEM Put Test"
                        : !strcmp(name, "get") ? "OSU OpenSHMEM Get Test"
                        : !strcmp(name, "put_nb") ? "OSU OpenSHMEM Put_nbi Test"
                                                   : "OSU OpenSHMEM Get_nbi Test";
    if (me == 0) {
        printf("# %s\n", title);
        printf("%-20s%20s\n", "# Size", bw ? "Bandwidth (MB/s)" : "Latency (us)");
    }
    for (long size = o->min; size <= o->max; size *= 2) {
        long iters, warm;
        loops(o, size, &iters, &warm);
        refill(s, r, size);
        double v = 0;
        if (me < pairs) {
            double t0 = 0;
            long n = iters + warm;
            if (!strcmp(name, "put_nb"))
                shmem_fence();
            for (long i = 0; i < n; i++) {
                if (i == warm)
                    t0 = now_us();
                if (bw) {
                    for (long w = 0; w < o->window; w++) {
                        if (get)
                            shmem_getmem_nbi(r, s, size, peer);
                        else
                            shmem_putmem_nbi(r, s, size, peer);
                    }
                    shmem_quiet();
                    continue;
                }
                switch (kind) {
                case 0: shmem_putmem(r, s, size, peer); shmem_quiet(); break;
                case 1: shmem_getmem(r, s, size, peer); break;
                case 2: shmem_putmem_nbi(r, s, size, peer); shmem_quiet(); break;
                case 3: shmem_getmem_nbi(r, s, size, peer); shmem_quiet(); break;
                }
            }
            double el = now_us() - t0;
            v = bw ? (double)size * o->window * iters / el : el / iters;
        }
        gather2(v, 0);
        if (me == 0)
            row(o, size, senders_sum(pairs, 0) / (bw ? 1 : pairs));
    }
    shmem_barrier_all();
    shmem_free(s);
    shmem_free(r);
}

/* put_mr: iters puts of a size to consecutive offsets, one quiet, timed. */
static void run_message_rate(const struct opts *o) {
    long need = o->max * (o->warmup_large > 1 ? o->warmup_large : 1);
    for (long size = o->min; size <= o->max; size *= 2) {
        long iters, warm;
        loops(o, size, &iters, &warm);
        if (size * iters > need)
            need = size * iters;
    }
    char *buf = shmem_malloc(need);
    memset(buf, 0, need);
    int pairs = npes / 2, peer = me < pairs ? me + pairs : me - pairs;
    if (me < pairs) {
        for (long i = 0; i < o->warmup_large && (i + 1) * o->max <= need; i++)
            shmem_putmem(buf + i * o->max, buf + i * o->max, o->max, peer);
        shmem_quiet();
    }
    shmem_barrier_all();
    if (me == 0) {
        printf("# OSU OpenSHMEM Put Message Rate Test\n");
        printf("%-20s%20s\n", "# Size", "Messages/s");
    }
    for (long size = o->min; size <= o->max; size *= 2) {
        long iters, warm;
        loops(o, size, &iters, &warm);
        memset(buf, (int)size, size * iters);
        shmem_barrier_all();
        double rate = 0;
        if (me < pairs) {
            for (long i = 0; i < warm; i++)
                shmem_putmem(buf + (i % iters) * size, buf + (i % iters) * size, size, peer);
            shmem_quiet();
            double t0 = now_us();
            for (long i = 0; i < iters; i++)
                shmem_putmem(buf + i * size, buf + i * size, size, peer);
            shmem_quiet();
            rate = iters / ((now_us() - t0) / 1e6);
        }
        gather2(rate, 0);
        if (me == 0)
            printf("%-20ld%20.*f\n", size, o->precision, senders_sum(pairs, 0));
    }
    shmem_barrier_all();
    shmem_free(buf);
}

/* atomics: each operation on its own element of the partner's buffer; the
 * non-fetching ones without a quiet, as OSU does. */
static void run_atomics(const struct opts *o) {
    static const char *names[] = {"fadd", "finc", "add", "inc", "cswap", "swap", "fetch", "set"};
    long n = o->iters + o->warmup;
    if (n < 1)
        n = 1;
    if (n > 1 << 16)
        n = 1 << 16;
    long long *buf = shmem_malloc(n * sizeof(long long));
    int pairs = npes / 2, peer = me < pairs ? me + pairs : me - pairs;
    if (me == 0) {
        printf("# OSU OpenSHMEM Atomic Operation Rate Test\n");
        printf("%-28s%20s%20s\n", "# Operation", "Million ops/s", "Latency (us)");
    }
    volatile long long sink = 0;
    for (int k = 0; k < 8; k++) {
        for (long i = 0; i < n; i++)
            buf[i] = me;
        shmem_barrier_all();
        double rate = 0, lat = 0;
        if (me < pairs) {
            double t0 = 0;
            for (long i = 0; i < o->warmup + o->iters; i++) {
                if (i == o->warmup)
                    t0 = now_us();
                long long *p = &buf[i % n];
                switch (k) {
                case 0: sink += shmem_longlong_atomic_fetch_add(p, 1, peer); break;
                case 1: sink += shmem_longlong_atomic_fetch_inc(p, peer); break;
                case 2: shmem_longlong_atomic_add(p, 1, peer); break;
                case 3: shmem_longlong_atomic_inc(p, peer); break;
                case 4: sink += shmem_longlong_atomic_compare_swap(p, peer, 7, peer); break;
                case 5: sink += shmem_longlong_atomic_swap(p, 7, peer); break;
                case 6: sink += shmem_longlong_atomic_fetch(p, peer); break;
                case 7: shmem_longlong_atomic_set(p, 7, peer); break;
                }
            }
            double el = now_us() - t0;
            rate = o->iters / (el / 1e6);
            lat = el / o->iters;
        }
        shmem_quiet();
        gather2(rate, lat);
        if (me == 0) {
            char op[64];
            snprintf(op, sizeof op, "shmem_int64_%s", names[k]);
            printf("%-28s%20.*f%20.*f\n", op, o->precision, senders_sum(pairs, 0) / 1e6, o->precision,
                   senders_sum(pairs, 1) / pairs);
        }
    }
    shmem_barrier_all();
    shmem_free(buf);
}

/* mean over the PEs of each PE's mean latency, as OSU's print_data_pgas */
static double mean_latency(double lat) {
    gather2(lat, 0);
    double sum = 0;
    if (me == 0)
        for (int p = 0; p < npes; p++)
            sum += stats[2 * p];
    return sum / npes;
}

static void run_barrier(const struct opts *o) {
    double timer = 0;
    for (long i = 0; i < o->iters + o->warmup; i++) {
        double t0 = now_us();
        shmem_barrier_all();
        if (i >= o->warmup)
            timer += now_us() - t0;
    }
    double avg = mean_latency(timer / o->iters);
    if (me == 0) {
        printf("# OSU OpenSHMEM Barrier Latency Test\n");
        printf("# %s\n", "Avg Latency(us)");
        printf("%*.*f\n", 20, o->precision, avg);
    }
}

static long psync_a[SHMEM_BCAST_SYNC_SIZE > SHMEM_COLLECT_SYNC_SIZE
                        ? (SHMEM_BCAST_SYNC_SIZE > SHMEM_REDUCE_SYNC_SIZE ? SHMEM_BCAST_SYNC_SIZE : SHMEM_REDUCE_SYNC_SIZE)
                        : (SHMEM_COLLECT_SYNC_SIZE > SHMEM_REDUCE_SYNC_SIZE ? SHMEM_COLLECT_SYNC_SIZE : SHMEM_REDUCE_SYNC_SIZE)];
static long psync_b[sizeof psync_a / sizeof psync_a[0]];
static long psync_all[2][SHMEM_ALLTOALL_SYNC_SIZE];

/* broadcast, collect, fcollect, reduce (float sum) and alltoall on all PEs:
 * every PE times each call, a barrier after each outside the timing; sizes
 * in bytes of 4-byte elements. */
static void run_collective(const char *name, const struct opts *o) {
    long maxn = o->max / 4 > 0 ? o->max / 4 : 1;
    long srcn = maxn, dstn = maxn;
    if (!strcmp(name, "collect") || !strcmp(name, "fcollect"))
        dstn = npes * maxn;
    if (!strcmp(name, "alltoall"))
        srcn = dstn = npes * maxn;
    int *src = shmem_malloc(srcn * 4), *dst = shmem_malloc(dstn * 4);
    long wrkn = maxn / 2 + 1 > SHMEM_REDUCE_MIN_WRKDATA_SIZE ? maxn / 2 + 1 : SHMEM_REDUCE_MIN_WRKDATA_SIZE;
    float *wrk = shmem_malloc(wrkn * sizeof(float));
    for (long i = 0; i < srcn; i++)
        src[i] = (me << 24) + (int)i;
    if (!strcmp(name, "reduce"))
        for (long i = 0; i < srcn; i++)
            ((float *)src)[i] = (float)(me + i);
    for (size_t i = 0; i < sizeof psync_a / sizeof psync_a[0]; i++)
        psync_a[i] = psync_b[i] = SHMEM_SYNC_VALUE;
    for (int i = 0; i < SHMEM_ALLTOALL_SYNC_SIZE; i++)
        psync_all[0][i] = psync_all[1][i] = SHMEM_SYNC_VALUE;
    const char *title = !strcmp(name, "broadcast") ? "OSU OpenSHMEM Broadcast Latency Test"
                        : !strcmp(name, "collect") ? "OSU OpenSHMEM Collect Latency Test"
                        : !strcmp(name, "fcollect") ? "OSU OpenSHMEM FCollect Latency Test"
                        : !strcmp(name, "reduce") ? "OSU OpenSHMEM Reduce Latency Test"
                                                  : "OSU OpenSHMEM Alltoall Latency Test";
    if (me == 0) {
        printf("# %s\n", title);
        printf("%-20s%20s\n", "# Size", "Avg Latency(us)");
    }
    shmem_barrier_all();
    for (long n = o->min / 4 > 0 ? o->min / 4 : 1; n * 4 <= (o->max > 4 ? o->max : 4); n *= 2) {
        long size = 4 * n, iters, warm;
        loops(o, size, &iters, &warm);
        double timer = 0;
        for (long i = 0; i < iters + warm; i++) {
            long *ps = (i & 1) ? psync_b : psync_a;
            double t0 = now_us();
            switch (name[0]) {
            case 'b': shmem_broadcast32(dst, src, n, 0, 0, 0, npes, ps); break;
            case 'c': shmem_collect32(dst, src, n, 0, 0, npes, ps); break;
            case 'f': shmem_fcollect32(dst, src, n, 0, 0, npes, ps); break;
            case 'r': shmem_float_sum_to_all((float *)dst, (float *)src, n, 0, 0, npes, wrk, ps); break;
            case 'a': shmem_alltoall32(dst, src, n, 0, 0, npes, psync_all[i & 1]); break;
            }
            double d = now_us() - t0;
            if (i >= warm)
                timer += d;
            shmem_barrier_all();
        }
        shmem_barrier_all();
        double avg = mean_latency(timer / iters);
        row(o, size, avg);
    }
    shmem_barrier_all();
    shmem_free(wrk);
    shmem_free(dst);
    shmem_free(src);
}

static int usage(void) {
    fprintf(stderr, "usage: osu_oshm TEST [-min B] [-max B] [-iters N] [-warmup N] [-precision D] [-settle-ms MS]\n"
                    "TEST: put get put_nb get_nb put_bw get_bw put_mr atomics barrier broadcast collect fcollect reduce alltoall\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return usage();
    const char *name = argv[1];
    static const char *pt2pt[] = {"put", "get", "put_nb", "get_nb", "put_bw", "get_bw", "put_mr", "atomics", "barrier", NULL};
    static const char *coll[] = {"broadcast", "collect", "fcollect", "reduce", "alltoall", NULL};
    int is_coll = 0, known = 0;
    for (int i = 0; pt2pt[i]; i++)
        known |= !strcmp(name, pt2pt[i]);
    for (int i = 0; coll[i]; i++)
        if (!strcmp(name, coll[i]))
            known = is_coll = 1;
    if (!known)
        return usage();
    /* the defaults of benchmarks/osu */
    struct opts o = {1, 1 << 20, 10000, 1000, 100, 10, 8192, 64, 3, 20};
    if (is_coll)
        o = (struct opts){4, 1 << 20, 1000, 200, 100, 10, 8192, 1, 3, 20};
    if (!strcmp(name, "put_mr"))
        o.iters = 500, o.warmup = 0, o.iters_large = 50, o.warmup_large = 0, o.large = 4096;
    if (!strcmp(name, "atomics"))
        o.iters = 500, o.warmup = 0, o.iters_large = 500, o.warmup_large = 0;
    if (!strcmp(name, "barrier"))
        o.iters = o.iters_large = 1000, o.warmup = o.warmup_large = 200;
    int iset = 0, wset = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        long v = atol(argv[i + 1]);
        if (!strcmp(argv[i], "-min")) o.min = v;
        else if (!strcmp(argv[i], "-max")) o.max = v;
        else if (!strcmp(argv[i], "-iters")) o.iters = v, iset = 1;
        else if (!strcmp(argv[i], "-warmup")) o.warmup = v, wset = 1;
        else if (!strcmp(argv[i], "-iters-large")) o.iters_large = v, iset = 0;
        else if (!strcmp(argv[i], "-warmup-large")) o.warmup_large = v, wset = 0;
        else if (!strcmp(argv[i], "-window")) o.window = v;
        else if (!strcmp(argv[i], "-precision")) o.precision = (int)v;
        else if (!strcmp(argv[i], "-settle-ms")) o.settle_ms = atof(argv[i + 1]);
        else return usage();
    }
    if (iset)
        o.iters_large = o.iters;
    if (wset)
        o.warmup_large = o.warmup;
    if (o.min < 1 || o.max < o.min || o.iters < 1 || o.warmup < 0)
        return usage();

    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    stats = shmem_malloc(2 * npes * sizeof(double));
    if (npes < 2) {
        if (me == 0)
            fprintf(stderr, "osu_oshm %s: needs at least 2 PEs\n", name);
        shmem_finalize();
        return 1;
    }
    settle(o.settle_ms);
    if (!strcmp(name, "put") || !strcmp(name, "get") || !strcmp(name, "put_nb") || !strcmp(name, "get_nb") ||
        !strcmp(name, "put_bw") || !strcmp(name, "get_bw"))
        run_pt2pt(name, &o);
    else if (!strcmp(name, "put_mr"))
        run_message_rate(&o);
    else if (!strcmp(name, "atomics"))
        run_atomics(&o);
    else if (!strcmp(name, "barrier"))
        run_barrier(&o);
    else
        run_collective(name, &o);
    fflush(stdout);
    shmem_barrier_all();
    shmem_finalize();
    return 0;
}
