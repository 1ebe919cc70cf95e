//go:build cgo && goshmem_capi

/* core.c: the untyped routines of goshmem's C library, the slow paths of
 * the hot ones, the program's static data as a symmetric region, the
 * deprecated active-set collectives and the locks. */
#define _GNU_SOURCE
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include "gsh.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int gsh_npes, gsh_me = -1;
uintptr_t gsh_heap_lo, gsh_heap_size, gsh_data_lo, gsh_data_size;
static char *gsh_no_peers[1];
char **gsh_heap_peer = gsh_no_peers, **gsh_data_peer = gsh_no_peers;
unsigned char *gsh_checked;
int gsh_go_pending, gsh_net_peers;
_Thread_local size_t gsh_any_from;
_Thread_local unsigned gsh_test_fails;
static int gsh_inited, gsh_thread_level;
static pthread_mutex_t gsh_connect_mu = PTHREAD_MUTEX_INITIALIZER;

void gsh_fatal(const char *fn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "goshmem: PE %d: %s: ", gsh_me, fn);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (gsh_inited) pshmem_global_exit(1);
    exit(1);
}

void gsh_fatal_go(const char *fn, const char *msg) { gsh_fatal(fn, "%s", msg); }

void gsh_misaligned(const char *fn, const void *p, int size) {
    gsh_fatal(fn, "the atomic's address %p is not aligned to %d bytes", p, size);
}

void gsh_bad_pe(const char *fn, int pe) {
    if (!gsh_inited) gsh_fatal(fn, "called before shmem_init");
    gsh_fatal(fn, "PE %d is not a PE of the job (valid: 0..%d)", pe, gsh_npes - 1);
}

/* gsh_connect is gsh_map's slow path: on the first use of pe it has Go
 * connect the PE and fill its entries of the tables, then looks again. It
 * returns NULL for an object in the heap or in static data that only the
 * transports reach (Go's path), and ends the job for an object that is
 * not symmetric. */
char *gsh_connect(const void *p, size_t n, int pe, const char *fn) {
    if (!gsh_checked[pe]) {
        pthread_mutex_lock(&gsh_connect_mu);
        if (!gsh_checked[pe]) {
            goshmem_go_connect(pe);
            __atomic_store_n(&gsh_checked[pe], 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&gsh_connect_mu);
        char *a = gsh_addr(p, n, pe);
        if (a) return a;
    }
    if (n == 0) return NULL; /* nothing to move: any address will do, the transports' path does nothing */
    uintptr_t off = (uintptr_t)p - gsh_data_lo;
    if (off < gsh_data_size) {
        if (n > gsh_data_size - off) gsh_fatal(fn, "%zu bytes at %p run past the end of the static data", n, p);
        return NULL;
    }
    off = (uintptr_t)p - gsh_heap_lo;
    if (off >= gsh_heap_size || n > gsh_heap_size - off)
        gsh_fatal(fn, "%zu bytes at %p are not symmetric: neither in the symmetric heap (%p, %zu bytes) nor in the "
                      "program's static data (%p, %zu bytes)", n, p, (void *)gsh_heap_lo, (size_t)gsh_heap_size,
                  (void *)gsh_data_lo, (size_t)gsh_data_size);
    return NULL;
}

/* gsh_wait_pause is a waiting loop's pause: spin a little, then yield the
 * core (PEs may outnumber cores), then sleep briefly now and then. It
 * drives Go's progress (shmem.Progress) as Go's waits do: where some PE is
 * reached through the network, every 64 spins, so that what the loop waits
 * for moves at once and not after tcp's passive delay; and at every pause
 * past the spinning, where the atomics that reach this PE's memory through
 * shared-memory messages (static data left in place, GOSHMEM_STATIC_DATA=0,
 * where UCX_TLS leaves tcp out) are applied only inside the library, and
 * the value this loop waits for may be one of them. */
void gsh_wait_pause(unsigned *n) {
    unsigned i = (*n)++;
    if (i < 256) {
        if (gsh_net_peers && i % 64 == 63) goshmem_go_progress();
        gsh_relax();
        return;
    }
    goshmem_go_progress();
    if (i % 64 != 0) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

/* Static data: the writable data and bss of the program (the PT_LOAD
 * segment with PF_W of the executable, less its RELRO part) are a second
 * symmetric region, which Go registers with ucp at init (shmem.SetRegions)
 * so that every PE reaches it through the transports as it reaches the
 * heap: tcp across hosts (served without this PE's participation), cma or
 * software on a host whose shared memory UCX_TLS leaves out. Where the
 * PEs map each other's heaps, they map each other's static data too, for
 * the hot paths: before main runs, the region is moved onto a memfd mapped
 * shared at the same address, which the other PEs of the host running
 * the same program map by opening /proc/PID/fd/FD; puts, gets and atomics
 * on static variables are then loads, stores and CPU atomics like those
 * on the heap, coherent with the transports' (whose targets apply them
 * with CPU atomics too). GOSHMEM_STATIC_DATA=0 leaves the pages in place:
 * the static data is then reached through the transports only. */
struct gsh_data_info {
    char magic[8];
    char boot_id[40];
    uint64_t pidns;
    int64_t pid, fd;
    uint64_t size;
};
static int gsh_data_fd = -1;
uint64_t *gsh_static_words;
const size_t gsh_static_words_bytes = GSH_STATIC_WORDS * sizeof(uint64_t);
static struct gsh_data_info gsh_data_me;

static int gsh_find_data(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    uintptr_t *r = arg, lo = 0, hi = 0, relro = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
            lo = info->dlpi_addr + ph->p_vaddr;
            hi = lo + ph->p_memsz;
        }
        if (ph->p_type == PT_GNU_RELRO) relro = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
    }
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (relro > lo) lo = (relro + page - 1) & ~(page - 1);
    r[0] = lo & ~(page - 1);
    r[1] = (hi + page - 1) & ~(page - 1);
    return 1; /* the first object is the executable */
}

static void gsh_read_id(const char *path, char *buf, size_t n) {
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return;
    ssize_t k = read(f, buf, n - 1);
    close(f);
    if (k > 0) buf[k] = 0;
}

__attribute__((constructor(101))) static void gsh_share_data(void) {
    uintptr_t r[2] = {0, 0};
    dl_iterate_phdr(gsh_find_data, r);
    if (r[1] <= r[0]) return;
    size_t size = r[1] - r[0];
    gsh_data_lo = r[0];
    gsh_data_size = size;
    /* A page of the library's own words (gsh_static_words): a symmetric
     * region of its own, apart from the data, so that it exists whether
     * the data is moved or not. */
    void *words = mmap(NULL, gsh_static_words_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (words != MAP_FAILED) gsh_static_words = words;
    if (getenv("GOSHMEM_STATIC_DATA") && strcmp(getenv("GOSHMEM_STATIC_DATA"), "0") == 0) return;
    int fd = memfd_create("goshmem-static-data", MFD_CLOEXEC);
    if (fd < 0) return;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return;
    }
    void *tmp = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (tmp == MAP_FAILED) {
        close(fd);
        return;
    }
    memcpy(tmp, (void *)r[0], size);
    /* One mmap replaces the pages: no moment without them. */
    void *at = mmap((void *)r[0], size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    munmap(tmp, size);
    if (at == MAP_FAILED) {
        close(fd);
        return;
    }
    gsh_data_fd = fd;
    memcpy(gsh_data_me.magic, "gshdata1", 8);
    gsh_read_id("/proc/sys/kernel/random/boot_id", gsh_data_me.boot_id, sizeof gsh_data_me.boot_id);
    struct stat sb;
    if (stat("/proc/self/ns/pid", &sb) == 0) gsh_data_me.pidns = sb.st_ino;
    gsh_data_me.pid = getpid();
    gsh_data_me.fd = fd;
    gsh_data_me.size = size;
}

/* gsh_data_publish returns what this PE publishes of its static data for
 * the others (Go puts it in the init blob). */
size_t gsh_data_publish(void **p) {
    if (gsh_data_fd < 0) return 0;
    *p = &gsh_data_me;
    return sizeof gsh_data_me;
}

/* gsh_data_attach maps PE pe's static data here from what it published,
 * when it runs the same program on this host; otherwise leaves it NULL
 * (the transports reach it). */
void gsh_data_attach(int pe, const void *b, size_t n) {
    struct gsh_data_info in;
    if (pe == gsh_me) {
        gsh_data_peer[pe] = gsh_data_size ? (char *)gsh_data_lo : NULL;
        return;
    }
    if (n != sizeof in || gsh_data_fd < 0) return;
    memcpy(&in, b, n);
    if (memcmp(in.magic, gsh_data_me.magic, 8) != 0 || strcmp(in.boot_id, gsh_data_me.boot_id) != 0 ||
        in.pidns != gsh_data_me.pidns || in.size != gsh_data_size)
        return;
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)in.pid, (long long)in.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "goshmem: PE %d: cannot map the static data of PE %d (%s: %s); it is reached through the transports\n",
                gsh_me, pe, path, strerror(errno));
        return;
    }
    void *m = mmap(NULL, in.size + (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED) gsh_data_peer[pe] = m;
}

int gsh_erms;

/* gsh_tables_init sizes the tables for npes PEs; Go fills them. */
void gsh_tables_init(int me, int npes, void *heap, size_t heap_size) {
#if defined(__x86_64__)
    unsigned int a, b, c, d;
    gsh_erms = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 9)); /* CPUID.7.0:EBX.ERMS */
#endif
    gsh_heap_peer = calloc((size_t)npes, sizeof(char *));
    gsh_data_peer = calloc((size_t)npes, sizeof(char *));
    gsh_checked = calloc((size_t)npes, 1);
    if (!gsh_heap_peer || !gsh_data_peer || !gsh_checked) gsh_fatal("shmem_init", "out of memory for %d PEs", npes);
    gsh_heap_lo = (uintptr_t)heap;
    gsh_heap_size = heap_size;
    gsh_heap_peer[me] = heap;
    gsh_data_peer[me] = gsh_data_size ? (char *)gsh_data_lo : NULL;
    gsh_me = me;
    gsh_npes = npes;
    gsh_inited = 1;
}

/* gsh_tables_free forgets the tables at the last finalize. */
void gsh_tables_free(void) {
    for (int pe = 0; pe < gsh_npes; pe++)
        if (pe != gsh_me && gsh_data_peer[pe]) munmap(gsh_data_peer[pe], gsh_data_size + (size_t)sysconf(_SC_PAGESIZE));
    free(gsh_heap_peer);
    free(gsh_data_peer);
    free(gsh_checked);
    gsh_heap_peer = gsh_data_peer = gsh_no_peers;
    gsh_checked = NULL;
    gsh_npes = 0;
    gsh_heap_lo = gsh_heap_size = 0;
    gsh_inited = 0;
}

/* Setup. */

/* gsh_global_exiting is set by shmem_global_exit: the launcher ends the
 * job, so the exit that follows must not wait in a finalize. */
static int gsh_global_exiting;

/* gsh_exit_finalize is the finalize of a program that exits (returns from
 * main, calls exit) initialized: OpenSHMEM programs written for start_pes
 * never call shmem_finalize (it did not exist), and programs exit(0) on
 * paths that skip it (usage, --help); OSHMEM, SOS and OSSS finalize them
 * too. A PE that exits with a failure does not wait for the others in the
 * finalize's barrier: its launcher ends the job on its status. */
static void gsh_exit_finalize(int status, void *arg) {
    (void)arg;
    if (status == 0 && gsh_inited && !gsh_global_exiting) pshmem_finalize();
}
static void gsh_exit_finalize_register(void) {
#if defined(__GLIBC__)
    on_exit(gsh_exit_finalize, NULL);
#endif
}
static pthread_once_t gsh_exit_once = PTHREAD_ONCE_INIT;

GSH_WEAK(shmem_init)
void pshmem_init(void) {
    if (goshmem_go_init(SHMEM_THREAD_SINGLE, NULL) != 0) exit(1);
    pthread_once(&gsh_exit_once, gsh_exit_finalize_register);
}
GSH_WEAK(shmem_init_thread)
int pshmem_init_thread(int requested, int *provided) {
    if (requested < SHMEM_THREAD_SINGLE || requested > SHMEM_THREAD_MULTIPLE) {
        fprintf(stderr, "goshmem: shmem_init_thread: requested thread level %d is not one of SHMEM_THREAD_*\n", requested);
        return -1;
    }
    int p = requested;
    int r = goshmem_go_init(requested, &p);
    if (r == 0) {
        gsh_thread_level = p;
        pthread_once(&gsh_exit_once, gsh_exit_finalize_register);
    }
    if (provided) *provided = p;
    return r;
}
GSH_WEAK(shmem_query_thread)
void pshmem_query_thread(int *provided) { *provided = gsh_thread_level; }
GSH_WEAK(shmem_query_initialized)
void pshmem_query_initialized(int *initialized) { *initialized = gsh_inited; }
GSH_WEAK(shmem_finalize)
void pshmem_finalize(void) {
    if (gsh_inited) goshmem_go_finalize();
}
GSH_WEAK(shmem_my_pe)
int pshmem_my_pe(void) { return gsh_inited ? gsh_me : -1; }
GSH_WEAK(shmem_n_pes)
int pshmem_n_pes(void) { return gsh_inited ? gsh_npes : -1; }
GSH_WEAK(start_pes)
void pstart_pes(int npes) {
    (void)npes;
    if (!gsh_inited) pshmem_init();
}
GSH_WEAK(_my_pe)
int p_my_pe(void) { return pshmem_my_pe(); }
GSH_WEAK(_num_pes)
int p_num_pes(void) { return pshmem_n_pes(); }
/* shmem_global_exit flushes the program's streams first (the launcher
 * ends the other PEs, and may end this one, once told), then exits as C
 * does: atexit handlers run. */
GSH_WEAK(shmem_global_exit)
void pshmem_global_exit(int status) {
    fflush(NULL);
    gsh_global_exiting = 1;
    if (gsh_inited) goshmem_go_global_exit(status);
    exit(status);
}
GSH_WEAK(shmem_pcontrol)
void pshmem_pcontrol(int level, ...) { goshmem_go_pcontrol(level); }
GSH_WEAK(shmem_info_get_version)
void pshmem_info_get_version(int *major, int *minor) {
    *major = SHMEM_MAJOR_VERSION;
    *minor = SHMEM_MINOR_VERSION;
}
GSH_WEAK(shmem_info_get_name)
void pshmem_info_get_name(char *name) {
    strncpy(name, SHMEM_VENDOR_STRING, SHMEM_MAX_NAME_LEN - 1);
    name[SHMEM_MAX_NAME_LEN - 1] = 0;
}

GSH_WEAK(shmem_ptr)
void *pshmem_ptr(const void *dest, int pe) {
    if (!gsh_inited || pe < 0 || pe >= gsh_npes) return NULL;
    char *a = gsh_addr(dest, 1, pe);
    if (a || gsh_checked[pe]) return a;
    uintptr_t h = (uintptr_t)dest - gsh_heap_lo, d = (uintptr_t)dest - gsh_data_lo;
    if (h >= gsh_heap_size && d >= gsh_data_size) return NULL;
    return gsh_connect(dest, 1, pe, "shmem_ptr");
}
GSH_WEAK(shmem_addr_accessible)
int pshmem_addr_accessible(const void *addr, int pe) {
    if (!pshmem_pe_accessible(pe)) return 0;
    if ((uintptr_t)addr - gsh_heap_lo < gsh_heap_size || pshmem_ptr(addr, pe) != NULL) return 1;
    /* Static data not mapped here: where the PE has the same (it runs
     * this program), the transports reach it. */
    return (uintptr_t)addr - gsh_data_lo < gsh_data_size && goshmem_go_addr_accessible((void *)addr, pe);
}
void shmemx_heap_bounds(void **base, size_t *size) {
    *base = (void *)gsh_heap_lo;
    *size = gsh_heap_size;
}
void shmemx_data_bounds(void **base, size_t *size) {
    *base = (void *)gsh_data_lo;
    *size = gsh_data_size;
}

/* Untyped RMA. */
GSH_BOTHV(putmem, (void *dest, const void *source, size_t nelems, int pe), (dest, source, nelems, pe),
          { gsh_put(ctx, dest, source, nelems, pe, 0, fn); })
GSH_BOTHV(getmem, (void *dest, const void *source, size_t nelems, int pe), (dest, source, nelems, pe),
          { gsh_get(ctx, dest, source, nelems, pe, 0, fn); })
GSH_BOTHV(putmem_nbi, (void *dest, const void *source, size_t nelems, int pe), (dest, source, nelems, pe),
          { gsh_put(ctx, dest, source, nelems, pe, 1, fn); })
GSH_BOTHV(getmem_nbi, (void *dest, const void *source, size_t nelems, int pe), (dest, source, nelems, pe),
          { gsh_get(ctx, dest, source, nelems, pe, 1, fn); })
GSH_BOTHV(putmem_signal, (void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe),
          (dest, source, nelems, sig_addr, signal, sig_op, pe),
          { gsh_put_signal(ctx, dest, source, nelems, sig_addr, signal, sig_op, pe, 0, fn); })
GSH_BOTHV(putmem_signal_nbi, (void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe),
          (dest, source, nelems, sig_addr, signal, sig_op, pe),
          { gsh_put_signal(ctx, dest, source, nelems, sig_addr, signal, sig_op, pe, 1, fn); })

/* Signals. */
GSH_WEAK(shmem_signal_fetch)
uint64_t pshmem_signal_fetch(const uint64_t *sig_addr) { return __atomic_load_n(sig_addr, __ATOMIC_ACQUIRE); }
GSH_CMP(sig, uint64_t)
/* shmem_signal_wait_until returns the value that met the condition. */
GSH_WEAK(shmem_signal_wait_until)
uint64_t pshmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value) {
    for (unsigned n = 0;; gsh_wait_pause(&n)) {
        uint64_t x = __atomic_load_n(sig_addr, __ATOMIC_ACQUIRE);
        if (gsh_cmpv_sig(x, cmp, cmp_value, GSH_FN)) return x;
    }
}
GSH_BOTHV(signal_add, (uint64_t *sig_addr, uint64_t signal, int pe), (sig_addr, signal, pe),
          { gsh_amo64(ctx, GSH_AMO_ADD, sig_addr, signal, 0, pe, fn); })
GSH_BOTHV(signal_set, (uint64_t *sig_addr, uint64_t signal, int pe), (sig_addr, signal, pe),
          { gsh_amo64(ctx, GSH_AMO_SET, sig_addr, signal, 0, pe, fn); })

/* The deprecated untyped waits, on a long. */
GSH_WEAK(shmem_wait)
void pshmem_wait(long *ivar, long cmp_value) { pshmem_long_wait_until(ivar, SHMEM_CMP_NE, cmp_value); }
GSH_WEAK(shmem_wait_until)
void pshmem_wait_until(long *ivar, int cmp, long cmp_value) { pshmem_long_wait_until(ivar, cmp, cmp_value); }

/* Ordering and completion: a CPU fence orders the stores to mapped
 * memory; Go completes what went through it. */
static inline void gsh_quiet(shmem_ctx_t ctx, const char *fn) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&gsh_go_pending, __ATOMIC_RELAXED)) goshmem_go_quiet(gsh_h(ctx), fn);
}
/* The world team's barrier (gsh_wsync). It is Go's (shmem/sync.go,
 * disseminate, and the collective word of stall.go's beginColl) word for
 * word, on the same words, so that a PE may pass one barrier here and the
 * next in Go (an allocation's), and C and Go PEs may meet in one: the
 * collective word counts the call and says its kind; the barrier number
 * goes up by one; in round k the PE stores the least and greatest key it
 * heard of into its partner's line (the words of the number's parity) and
 * brings the partner's counter to the number with a release store, then
 * waits for its own counter and folds in the keys it got. Keys that differ
 * at the end are a mismatch, which Go reports. A wait that lasts goes to
 * Go, which drives progress, yields, and serves the stall reports. */
struct gsh_wsync gsh_wsync;

/* gsh_wsync_init starts lending (Go calls it, then gsh_wsync_round for
 * each round, the last of which turns the C barrier on). */
void gsh_wsync_init(int rounds, int spin, uint64_t *number, uint64_t *collword, uint64_t kind_barrier_all, uint64_t kind_sync_all) {
    gsh_wsync_free();
    struct gsh_wsync *w = &gsh_wsync;
    w->own = calloc((size_t)rounds + 1, sizeof(uint64_t *));
    w->peer = calloc((size_t)rounds + 1, sizeof(uint64_t *));
    if (!w->own || !w->peer) gsh_fatal("shmem_init", "out of memory");
    w->rounds = rounds;
    w->spin = spin;
    w->number = number;
    w->collword = collword;
    w->kind_barrier_all = kind_barrier_all;
    w->kind_sync_all = kind_sync_all;
    w->on = rounds == 0;
}

void gsh_wsync_round(int k, uint64_t *own, uint64_t *peer) {
    gsh_wsync.own[k] = own;
    gsh_wsync.peer[k] = peer;
    gsh_wsync.on = k == gsh_wsync.rounds - 1;
}

int gsh_wsync_on(void) { return gsh_wsync.on; }

void gsh_wsync_free(void) {
    free(gsh_wsync.own);
    free(gsh_wsync.peer);
    memset(&gsh_wsync, 0, sizeof gsh_wsync);
}

static void gsh_world_sync(uint64_t kind, int sync) {
    struct gsh_wsync *w = &gsh_wsync;
    uint64_t word = ((__atomic_load_n(w->collword, __ATOMIC_RELAXED) >> 9) + 1) << 9 | kind << 1 | 1;
    __atomic_store_n(w->collword, word, __ATOMIC_RELEASE);
    uint64_t epoch = ++*w->number, lo = word, hi = word;
    unsigned keys = 1 + 2 * (unsigned)(epoch & 1);
    for (int k = 0; k < w->rounds; k++) {
        uint64_t *peer = w->peer[k], *own = w->own[k];
        __atomic_store_n(&peer[keys], lo, __ATOMIC_RELAXED);
        __atomic_store_n(&peer[keys + 1], hi, __ATOMIC_RELAXED);
        __atomic_store_n(&peer[0], epoch, __ATOMIC_RELEASE);
        for (int n = 0; __atomic_load_n(own, __ATOMIC_ACQUIRE) < epoch; n++) {
            if (GSH_UNLIKELY(n == w->spin)) {
                goshmem_go_world_wait(own, epoch);
                break;
            }
            gsh_relax();
        }
        uint64_t l = __atomic_load_n(&own[keys], __ATOMIC_RELAXED), h = __atomic_load_n(&own[keys + 1], __ATOMIC_RELAXED);
        lo = l < lo ? l : lo;
        hi = h > hi ? h : hi;
    }
    if (GSH_UNLIKELY(lo != hi)) goshmem_go_world_mismatch(sync);
    __atomic_store_n(w->collword, word & ~(uint64_t)1, __ATOMIC_RELEASE);
}

GSH_WEAK(shmem_barrier_all)
void pshmem_barrier_all(void) {
    if (GSH_UNLIKELY(!gsh_wsync.on)) {
        goshmem_go_barrier_all();
        return;
    }
    gsh_quiet(SHMEM_CTX_DEFAULT, GSH_FN);
    gsh_world_sync(gsh_wsync.kind_barrier_all, 0);
}
GSH_WEAK(shmem_sync_all)
void pshmem_sync_all(void) {
    if (GSH_UNLIKELY(!gsh_wsync.on)) {
        goshmem_go_sync_all();
        return;
    }
    gsh_world_sync(gsh_wsync.kind_sync_all, 1);
}

GSH_WEAK(shmem_ctx_quiet)
void pshmem_ctx_quiet(shmem_ctx_t ctx) { gsh_quiet(ctx, GSH_FN); }
GSH_WEAK(shmem_quiet)
void pshmem_quiet(void) { gsh_quiet(SHMEM_CTX_DEFAULT, GSH_FN); }
GSH_WEAK(shmem_ctx_fence)
void pshmem_ctx_fence(shmem_ctx_t ctx) { gsh_quiet(ctx, GSH_FN); }
GSH_WEAK(shmem_fence)
void pshmem_fence(void) { gsh_quiet(SHMEM_CTX_DEFAULT, GSH_FN); }
static void gsh_pe_quiet(shmem_ctx_t ctx, const int *target_pes, size_t npes, const char *fn) {
    for (size_t i = 0; i < npes; i++) gsh_pe(ctx, target_pes[i], fn);
    gsh_quiet(ctx, fn);
}
GSH_WEAK(shmem_ctx_pe_quiet)
void pshmem_ctx_pe_quiet(shmem_ctx_t ctx, const int *target_pes, size_t npes) { gsh_pe_quiet(ctx, target_pes, npes, GSH_FN); }
GSH_WEAK(shmem_pe_quiet)
void pshmem_pe_quiet(const int *target_pes, size_t npes) { gsh_pe_quiet(SHMEM_CTX_DEFAULT, target_pes, npes, GSH_FN); }

/* Contexts. */
int gsh_ctx_pe(shmem_ctx_t ctx, int pe, const char *fn) {
    if (ctx == SHMEM_CTX_INVALID || !ctx->live)
        gsh_fatal(fn, "the context is %s", ctx == SHMEM_CTX_INVALID ? "SHMEM_CTX_INVALID" : "destroyed");
    if (GSH_UNLIKELY((unsigned)pe >= (unsigned)ctx->npes)) {
        if (!ctx->world) gsh_bad_pe(fn, pe);
        gsh_fatal(fn, "PE %d is not a PE of the context's team (valid: 0..%d)", pe, ctx->npes - 1);
    }
    return ctx->world ? ctx->world[pe] : pe;
}

/* gsh_ctx_new makes a context on team (0 for shmem_ctx_create's world
 * context) with its map of team PE numbers to world ones. */
static int gsh_ctx_new(shmem_team_t team, long options, shmem_ctx_t *ctx, const char *fn) {
    *ctx = SHMEM_CTX_INVALID;
    uintptr_t h;
    if (goshmem_go_ctx_create((uintptr_t)team, options, &h, fn) != 0) return -1;
    struct goshmem_ctx *c = calloc(1, sizeof *c);
    if (!c) gsh_fatal(fn, "out of memory");
    c->h = h;
    c->npes = gsh_npes;
    if (team != SHMEM_TEAM_INVALID && team != SHMEM_TEAM_WORLD) {
        c->npes = pshmem_team_n_pes(team);
        c->world = malloc((size_t)c->npes * sizeof(int));
        if (!c->world) gsh_fatal(fn, "out of memory");
        for (int i = 0; i < c->npes; i++) c->world[i] = pshmem_team_translate_pe(team, i, SHMEM_TEAM_WORLD);
    }
    __atomic_store_n(&c->live, 1, __ATOMIC_RELEASE);
    *ctx = c;
    return 0;
}
GSH_WEAK(shmem_ctx_create)
int pshmem_ctx_create(long options, shmem_ctx_t *ctx) { return gsh_ctx_new(SHMEM_TEAM_INVALID, options, ctx, GSH_FN); }
GSH_WEAK(shmem_team_create_ctx)
int pshmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t *ctx) {
    if (team == SHMEM_TEAM_INVALID) {
        *ctx = SHMEM_CTX_INVALID;
        return -1;
    }
    return gsh_ctx_new(team, options, ctx, GSH_FN);
}
GSH_WEAK(shmem_ctx_destroy)
void pshmem_ctx_destroy(shmem_ctx_t ctx) {
    if (ctx == SHMEM_CTX_INVALID) return;
    if (ctx == SHMEM_CTX_DEFAULT) gsh_fatal(GSH_FN, "SHMEM_CTX_DEFAULT cannot be destroyed");
    if (!ctx->live) gsh_fatal(GSH_FN, "the context is already destroyed");
    goshmem_go_ctx_destroy(ctx->h, GSH_FN);
    ctx->live = 0;
    free(ctx->world);
    ctx->world = NULL;
}
GSH_WEAK(shmem_ctx_session_start)
void pshmem_ctx_session_start(shmem_ctx_t ctx, long options, const shmem_ctx_session_config_t *config, long config_mask) {
    gsh_pe(ctx, 0, GSH_FN); /* checks ctx */
    goshmem_go_session_start(gsh_h(ctx), options, config, config_mask, GSH_FN);
}
GSH_WEAK(shmem_ctx_session_stop)
void pshmem_ctx_session_stop(shmem_ctx_t ctx) {
    gsh_pe(ctx, 0, GSH_FN);
    goshmem_go_session_stop(gsh_h(ctx), GSH_FN);
}
GSH_WEAK(shmem_ctx_get_team)
int pshmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t *team) {
    *team = SHMEM_TEAM_INVALID;
    if (ctx == SHMEM_CTX_INVALID || (ctx != SHMEM_CTX_DEFAULT && !ctx->live)) return -1;
    uintptr_t t;
    if (goshmem_go_ctx_get_team(gsh_h(ctx), &t) != 0) return -1;
    *team = (shmem_team_t)t;
    return 0;
}

/* Team collectives. Package shmem runs them on the symmetric heap; a
 * collective whose source or dest is the program's static data (symmetric
 * in C, unknown to package shmem) runs here instead: between two syncs of
 * the team every PE gets what it needs from the other PEs' sources (static
 * data is mapped on the host; a heap object comes through a transport where
 * it is not), so nothing is written to another PE's dest. */
/* gsh_static reports whether p is in the program's static data. It looks
 * at the address alone, not at a length, so that every PE of a collect
 * chooses alike whatever its count. */
static int gsh_static(const void *p) { return (uintptr_t)p - gsh_data_lo < gsh_data_size; }

/* gsh_team_world returns the world number of the team's PE i. */
static int gsh_team_world(shmem_team_t team, int i) { return pshmem_team_translate_pe(team, i, SHMEM_TEAM_WORLD); }

/* gsh_static_word reads PE pe's first word of gsh_static_words, through
 * package shmem (the words are a symmetric region of their own, reached by
 * every transport). */
static uint64_t gsh_static_word(int pe, const char *fn) {
    if (pe == gsh_me) return __atomic_load_n(&gsh_static_words[0], __ATOMIC_ACQUIRE);
    return goshmem_go_amo(gsh_h(SHMEM_CTX_DEFAULT), GSH_AMO_FETCH, gsh_static_words, 0, 0, 8, pe, fn);
}

__attribute__((format(printf, 2, 3))) static int gsh_coll_error(const char *fn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "goshmem: PE %d: %s: ", gsh_me, fn);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

/* gsh_coll_static is a team collective with static data: kind and the
 * arguments as for goshmem_go_coll (nbytes the bytes of one PE's block). */
static int gsh_coll_static(shmem_team_t team, int kind, void *dest, const void *source, size_t nbytes, ptrdiff_t a,
                           ptrdiff_t b, int esize, const char *fn) {
    int tn = pshmem_team_n_pes(team), tme = pshmem_team_my_pe(team);
    if (tn < 0) return gsh_coll_error(fn, "invalid team (SHMEM_TEAM_INVALID, or a team this PE is not in)");
    if (kind == GSH_COLL_BROADCAST && (a < 0 || a >= tn))
        return gsh_coll_error(fn, "PE_root %d is not a PE of the team (valid: 0..%d)", (int)a, tn - 1);
    size_t *off = NULL, *len = NULL;
    if (kind == GSH_COLL_COLLECT) {
        /* Every PE's length, through the words: published before the
         * first sync, read before the last (the next collective's
         * publishing comes after it). One word serves every team, so
         * two threads of a PE must not run collects on static data at
         * once. */
        off = malloc((size_t)tn * sizeof *off);
        len = malloc((size_t)tn * sizeof *len);
        if (!off || !len) gsh_fatal(fn, "out of memory for %d PEs", tn);
        __atomic_store_n(&gsh_static_words[0], (uint64_t)nbytes, __ATOMIC_RELEASE);
    }
    if (pshmem_team_sync(team) != 0) return -1;
    size_t pos = 0;
    for (int i = 0; i < tn; i++) {
        int j = (tme + i) % tn, pe = gsh_team_world(team, j); /* each PE starts with another */
        switch (kind) {
        case GSH_COLL_BROADCAST:
            if (i == 0) {
                if (tme == (int)a) memmove(dest, source, nbytes);
                else pshmem_getmem(dest, source, nbytes, gsh_team_world(team, (int)a));
            }
            break;
        case GSH_COLL_FCOLLECT:
            if (j == tme) memmove((char *)dest + (size_t)j * nbytes, source, nbytes);
            else pshmem_getmem((char *)dest + (size_t)j * nbytes, source, nbytes, pe);
            break;
        case GSH_COLL_COLLECT:
            len[j] = (size_t)gsh_static_word(pe, fn);
            break;
        case GSH_COLL_ALLTOALL:
            if (j == tme) memmove((char *)dest + (size_t)j * nbytes, (const char *)source + (size_t)tme * nbytes, nbytes);
            else pshmem_getmem((char *)dest + (size_t)j * nbytes, (const char *)source + (size_t)tme * nbytes, nbytes, pe);
            break;
        case GSH_COLL_ALLTOALLS: {
            size_t ne = nbytes / (size_t)esize;
            gsh_strided(SHMEM_CTX_DEFAULT, 1, (char *)dest + (size_t)j * ne * (size_t)a * (size_t)esize,
                        (const char *)source + (size_t)tme * ne * (size_t)b * (size_t)esize, a, b, 1, ne, (size_t)esize, pe, fn);
            break;
        }
        }
    }
    if (kind == GSH_COLL_COLLECT) {
        for (int j = 0; j < tn; j++) {
            off[j] = pos;
            pos += len[j];
        }
        for (int i = 0; i < tn; i++) {
            int j = (tme + i) % tn;
            if (j == tme) memmove((char *)dest + off[j], source, len[j]);
            else pshmem_getmem((char *)dest + off[j], source, len[j], gsh_team_world(team, j));
        }
        free(off);
        free(len);
    }
    return pshmem_team_sync(team);
}

/* gsh_coll runs a team collective in Go, or here when it involves static
 * data. */
int gsh_coll(shmem_team_t team, int kind, void *dest, const void *source, size_t nbytes, ptrdiff_t a, ptrdiff_t b, int esize,
             const char *fn) {
    if (gsh_static(dest) || gsh_static(source))
        return gsh_coll_static(team, kind, dest, source, nbytes, a, b, esize, fn);
    return goshmem_go_coll((uintptr_t)team, kind, dest, (void *)source, nbytes, a, b, esize, fn);
}

/* Team collectives without a type. */
GSH_WEAK(shmem_broadcastmem)
int pshmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems, int PE_root) {
    return gsh_coll(team, GSH_COLL_BROADCAST, dest, source, nelems, PE_root, 0, 1, GSH_FN);
}
GSH_WEAK(shmem_collectmem)
int pshmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems) {
    return gsh_coll(team, GSH_COLL_COLLECT, dest, source, nelems, 0, 0, 1, GSH_FN);
}
GSH_WEAK(shmem_fcollectmem)
int pshmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems) {
    return gsh_coll(team, GSH_COLL_FCOLLECT, dest, source, nelems, 0, 0, 1, GSH_FN);
}
GSH_WEAK(shmem_alltoallmem)
int pshmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems) {
    return gsh_coll(team, GSH_COLL_ALLTOALL, dest, source, nelems, 0, 0, 1, GSH_FN);
}
GSH_WEAK(shmem_alltoallsmem)
int pshmem_alltoallsmem(shmem_team_t team, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems) {
    return gsh_coll(team, GSH_COLL_ALLTOALLS, dest, source, nelems, dst, sst, 1, GSH_FN);
}

/* gsh_reduce runs a team reduction or scan in Go; for a type Go has no
 * form of (long double), or static data, it gathers the sources with gets
 * and folds them here, in team order. */
int gsh_reduce(shmem_team_t team, int op, int ty, void *dest, const void *source, size_t n, size_t esize, gsh_combine_fn f,
               const char *fn) {
    size_t bytes = n * esize;
    if (!gsh_static(dest) && !gsh_static(source)) {
        int r = goshmem_go_reduce((uintptr_t)team, op, ty, dest, (void *)source, n, fn);
        if (r != -2) return r;
    }
    int tn = pshmem_team_n_pes(team), tme = pshmem_team_my_pe(team);
    if (tn < 0) gsh_fatal(fn, "invalid team");
    char *acc = malloc(bytes ? bytes : 1), *tmp = malloc(bytes ? bytes : 1);
    if (!acc || !tmp) gsh_fatal(fn, "out of memory for %zu bytes", bytes);
    if (pshmem_team_sync(team) != 0) return -1;
    int last = op == 7 ? tme : op == 8 ? tme - 1 : tn - 1;
    for (int i = 0; i <= last; i++) {
        int pe = pshmem_team_translate_pe(team, i, SHMEM_TEAM_WORLD);
        pshmem_getmem(i == 0 ? acc : tmp, source, bytes, pe);
        if (i > 0) f(acc, tmp, n);
    }
    if (pshmem_team_sync(team) != 0) return -1;
    if (last >= 0) memcpy(dest, acc, bytes);
    else memset(dest, 0, bytes); /* an exclusive scan's first PE gets zeros */
    free(acc);
    free(tmp);
    return 0;
}

/* The deprecated active-set collectives: the set is PE_start,
 * PE_start + 2^logPE_stride, ... (PE_size PEs), and pSync (every element
 * SHMEM_SYNC_VALUE before the call, and so again after it) holds the
 * counters, one use each so that an operation never takes another's
 * count: pSync[0] counts arrivals at the set's first PE, pSync[1] its
 * releases, pSync[2] the data of broadcast, collect, fcollect and
 * alltoall(s) arrived, pSync[3] carries collect's offsets. */
struct gsh_aset {
    int start, stride, size, idx;
};
static struct gsh_aset gsh_aset(const char *fn, int start, int log, int size, long *pSync) {
    struct gsh_aset s = {start, 1 << log, size, -1};
    if (!gsh_inited) gsh_fatal(fn, "called before shmem_init");
    if (start < 0 || log < 0 || log > 30 || size < 1 || start + (long)(size - 1) * s.stride >= gsh_npes)
        gsh_fatal(fn, "active set PE_start %d, logPE_stride %d, PE_size %d does not fit the job's %d PEs", start, log,
                  size, gsh_npes);
    if ((gsh_me - start) % s.stride == 0 && gsh_me >= start && (gsh_me - start) / s.stride < size)
        s.idx = (gsh_me - start) / s.stride;
    if (s.idx < 0) gsh_fatal(fn, "PE %d is not in the active set (PE_start %d, logPE_stride %d, PE_size %d)", gsh_me, start, log, size);
    if (!pSync) gsh_fatal(fn, "pSync is NULL");
    return s;
}
static int gsh_aset_pe(struct gsh_aset s, int i) { return s.start + i * s.stride; }

/* gsh_counted waits until *c reaches n, then takes n off. */
static void gsh_counted(long *c, long n) {
    unsigned k = 0;
    while (__atomic_load_n(c, __ATOMIC_ACQUIRE) < n) gsh_wait_pause(&k);
    __atomic_fetch_sub(c, n, __ATOMIC_ACQ_REL);
}

static void gsh_aset_sync(struct gsh_aset s, long *pSync) {
    if (s.size == 1) return;
    int root = s.start;
    if (gsh_me == root) {
        gsh_counted(&pSync[0], s.size - 1);
        for (int i = 1; i < s.size; i++) pshmem_long_atomic_add(&pSync[1], 1, gsh_aset_pe(s, i));
    } else {
        pshmem_long_atomic_add(&pSync[0], 1, root);
        gsh_counted(&pSync[1], 1);
    }
}

/* gsh_aset_done tells every member that this PE's data is there and waits
 * until every member's is. */
static void gsh_aset_done(struct gsh_aset s, long *pSync) {
    pshmem_quiet();
    for (int i = 0; i < s.size; i++) pshmem_long_atomic_add(&pSync[2], 1, gsh_aset_pe(s, i));
    gsh_counted(&pSync[2], s.size);
}

GSH_WEAK(shmem_barrier)
void pshmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync) {
    struct gsh_aset s = gsh_aset(GSH_FN, PE_start, logPE_stride, PE_size, pSync);
    pshmem_quiet();
    gsh_aset_sync(s, pSync);
}
GSH_WEAK(shmem_sync)
void pshmem_sync(int PE_start, int logPE_stride, int PE_size, long *pSync) {
    struct gsh_aset s = gsh_aset(GSH_FN, PE_start, logPE_stride, PE_size, pSync);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    gsh_aset_sync(s, pSync);
}

static void gsh_aset_broadcast(const char *fn, void *dest, const void *source, size_t bytes, int root, int start, int log,
                               int size, long *pSync) {
    struct gsh_aset s = gsh_aset(fn, start, log, size, pSync);
    if (root < 0 || root >= size) gsh_fatal(fn, "PE_root %d is not in 0..%d", root, size - 1);
    if (s.idx == root) {
        for (int i = 0; i < size; i++)
            if (i != root) pshmem_putmem(dest, source, bytes, gsh_aset_pe(s, i));
        pshmem_quiet();
        for (int i = 0; i < size; i++)
            if (i != root) pshmem_long_atomic_add(&pSync[2], 1, gsh_aset_pe(s, i));
    } else {
        gsh_counted(&pSync[2], 1);
    }
}
GSH_WEAK(shmem_broadcast32)
void pshmem_broadcast32(void *dest, const void *source, size_t nelems, int PE_root, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_broadcast(GSH_FN, dest, source, nelems * 4, PE_root, PE_start, logPE_stride, PE_size, pSync);
}
GSH_WEAK(shmem_broadcast64)
void pshmem_broadcast64(void *dest, const void *source, size_t nelems, int PE_root, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_broadcast(GSH_FN, dest, source, nelems * 8, PE_root, PE_start, logPE_stride, PE_size, pSync);
}

static void gsh_aset_fcollect(const char *fn, void *dest, const void *source, size_t bytes, int start, int log, int size, long *pSync) {
    struct gsh_aset s = gsh_aset(fn, start, log, size, pSync);
    for (int i = 0; i < size; i++) pshmem_putmem((char *)dest + (size_t)s.idx * bytes, source, bytes, gsh_aset_pe(s, i));
    gsh_aset_done(s, pSync);
}
GSH_WEAK(shmem_fcollect32)
void pshmem_fcollect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_fcollect(GSH_FN, dest, source, nelems * 4, PE_start, logPE_stride, PE_size, pSync);
}
GSH_WEAK(shmem_fcollect64)
void pshmem_fcollect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_fcollect(GSH_FN, dest, source, nelems * 8, PE_start, logPE_stride, PE_size, pSync);
}

/* collect: the offsets travel down the set, PE by PE, in pSync[3] (the
 * offset plus one, so that 0 means none yet). */
static void gsh_aset_collect(const char *fn, void *dest, const void *source, size_t bytes, int start, int log, int size, long *pSync) {
    struct gsh_aset s = gsh_aset(fn, start, log, size, pSync);
    long off = 0;
    if (s.idx > 0) {
        unsigned k = 0;
        while ((off = __atomic_load_n(&pSync[3], __ATOMIC_ACQUIRE)) == 0) gsh_wait_pause(&k);
        __atomic_store_n(&pSync[3], 0, __ATOMIC_RELAXED);
        off--;
    }
    if (s.idx + 1 < size) pshmem_long_atomic_set(&pSync[3], off + (long)bytes + 1, gsh_aset_pe(s, s.idx + 1));
    for (int i = 0; i < size; i++) pshmem_putmem((char *)dest + off, source, bytes, gsh_aset_pe(s, i));
    gsh_aset_done(s, pSync);
}
GSH_WEAK(shmem_collect32)
void pshmem_collect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_collect(GSH_FN, dest, source, nelems * 4, PE_start, logPE_stride, PE_size, pSync);
}
GSH_WEAK(shmem_collect64)
void pshmem_collect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_collect(GSH_FN, dest, source, nelems * 8, PE_start, logPE_stride, PE_size, pSync);
}

static void gsh_aset_alltoalls(const char *fn, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,
                               size_t esize, int start, int log, int size, long *pSync) {
    struct gsh_aset s = gsh_aset(fn, start, log, size, pSync);
    for (int j = 0; j < size; j++) {
        int i = (s.idx + j) % size; /* start with the next PE, not all with the first */
        gsh_strided(SHMEM_CTX_DEFAULT, 0, (char *)dest + (size_t)s.idx * nelems * dst * esize,
                    (const char *)source + (size_t)i * nelems * sst * esize, dst, sst, 1, nelems, esize, gsh_aset_pe(s, i), fn);
    }
    gsh_aset_done(s, pSync);
}
GSH_WEAK(shmem_alltoall32)
void pshmem_alltoall32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_alltoalls(GSH_FN, dest, source, 1, 1, nelems, 4, PE_start, logPE_stride, PE_size, pSync);
}
GSH_WEAK(shmem_alltoall64)
void pshmem_alltoall64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_alltoalls(GSH_FN, dest, source, 1, 1, nelems, 8, PE_start, logPE_stride, PE_size, pSync);
}
GSH_WEAK(shmem_alltoalls32)
void pshmem_alltoalls32(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_alltoalls(GSH_FN, dest, source, dst, sst, nelems, 4, PE_start, logPE_stride, PE_size, pSync);
}
GSH_WEAK(shmem_alltoalls64)
void pshmem_alltoalls64(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync) {
    gsh_aset_alltoalls(GSH_FN, dest, source, dst, sst, nelems, 8, PE_start, logPE_stride, PE_size, pSync);
}

/* shmem_TYPE_OP_to_all: every member gets every member's source, in set
 * order, folds them here, and stores the result once all have read. */
void gsh_to_all(void *dest, const void *source, int nreduce, size_t esize, int PE_start, int logPE_stride, int PE_size,
                long *pSync, gsh_combine_fn f, const char *fn) {
    struct gsh_aset s = gsh_aset(fn, PE_start, logPE_stride, PE_size, pSync);
    if (nreduce < 0) gsh_fatal(fn, "nreduce %d is negative", nreduce);
    size_t bytes = (size_t)nreduce * esize;
    char *acc = malloc(bytes ? bytes : 1), *tmp = malloc(bytes ? bytes : 1);
    if (!acc || !tmp) gsh_fatal(fn, "out of memory for %zu bytes", bytes);
    pshmem_quiet();
    gsh_aset_sync(s, pSync);
    for (int i = 0; i < PE_size; i++) {
        pshmem_getmem(i == 0 ? acc : tmp, source, bytes, gsh_aset_pe(s, i));
        if (i > 0) f(acc, tmp, (size_t)nreduce);
    }
    gsh_aset_sync(s, pSync);
    memcpy(dest, acc, bytes);
    free(acc);
    free(tmp);
}

/* Locks: a ticket lock in the lock word of PE 0 (the next ticket in the
 * high 32 bits, the ticket served in the low 32), so it works the same
 * for a lock in the heap or in static data. */
GSH_WEAK(shmem_set_lock)
void pshmem_set_lock(long *lock) {
    uint64_t t = gsh_amo64(SHMEM_CTX_DEFAULT, GSH_AMO_FETCH_ADD, lock, 1ULL << 32, 0, 0, GSH_FN) >> 32;
    unsigned k = 0;
    while ((uint32_t)gsh_amo64(SHMEM_CTX_DEFAULT, GSH_AMO_FETCH, lock, 0, 0, 0, GSH_FN) != (uint32_t)t) gsh_wait_pause(&k);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
GSH_WEAK(shmem_clear_lock)
void pshmem_clear_lock(long *lock) {
    pshmem_quiet();
    gsh_amo64(SHMEM_CTX_DEFAULT, GSH_AMO_ADD, lock, 1, 0, 0, GSH_FN);
    pshmem_quiet();
}
GSH_WEAK(shmem_test_lock)
int pshmem_test_lock(long *lock) {
    uint64_t v = gsh_amo64(SHMEM_CTX_DEFAULT, GSH_AMO_FETCH, lock, 0, 0, 0, GSH_FN);
    if ((uint32_t)(v >> 32) != (uint32_t)v) return 1;
    if (gsh_amo64(SHMEM_CTX_DEFAULT, GSH_AMO_COMPARE_SWAP, lock, v + (1ULL << 32), v, 0, GSH_FN) != v) return 1;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return 0;
}

/* Deprecated memory routines and the cache routines (no-ops: the CPUs
 * keep caches coherent). */
GSH_WEAK(shmalloc)
void *pshmalloc(size_t size) { return pshmem_malloc(size); }
GSH_WEAK(shfree)
void pshfree(void *ptr) { pshmem_free(ptr); }
GSH_WEAK(shrealloc)
void *pshrealloc(void *ptr, size_t size) { return pshmem_realloc(ptr, size); }
GSH_WEAK(shmemalign)
void *pshmemalign(size_t alignment, size_t size) { return pshmem_align(alignment, size); }
GSH_WEAK(shmem_clear_cache_inv)
void pshmem_clear_cache_inv(void) {}
GSH_WEAK(shmem_set_cache_inv)
void pshmem_set_cache_inv(void) {}
GSH_WEAK(shmem_clear_cache_line_inv)
void pshmem_clear_cache_line_inv(void *dest) { (void)dest; }
GSH_WEAK(shmem_set_cache_line_inv)
void pshmem_set_cache_line_inv(void *dest) { (void)dest; }
GSH_WEAK(shmem_udcflush)
void pshmem_udcflush(void) {}
GSH_WEAK(shmem_udcflush_line)
void pshmem_udcflush_line(void *dest) { (void)dest; }

GSH_WEAK(shmem_team_ptr)
void *pshmem_team_ptr(shmem_team_t team, const void *dest, int pe) {
    int w = pshmem_team_translate_pe(team, pe, SHMEM_TEAM_WORLD);
    return w < 0 ? NULL : pshmem_ptr(dest, w);
}

/* The routines capi.go defines (Go exports them as pshmem_NAME): an alias
 * names a definition of its own translation unit only, so their shmem_
 * names are weak functions calling them, replaceable as the aliases are. */
#define GSH_WEAK_GO(ret, name, params, args) \
    __attribute__((weak)) ret shmem_##name params { return pshmem_##name args; }
GSH_WEAK_GO(int, pe_accessible, (int pe), (pe))
GSH_WEAK_GO(int, team_sync, (shmem_team_t team), (team))
GSH_WEAK_GO(void *, malloc, (size_t size), (size))
GSH_WEAK_GO(void *, calloc, (size_t count, size_t size), (count, size))
GSH_WEAK_GO(void *, align, (size_t alignment, size_t size), (alignment, size))
GSH_WEAK_GO(void *, malloc_with_hints, (size_t size, long hints), (size, hints))
GSH_WEAK_GO(void *, realloc, (void *ptr, size_t size), (ptr, size))
GSH_WEAK_GO(void, free, (void *ptr), (ptr))
GSH_WEAK_GO(int, team_my_pe, (shmem_team_t team), (team))
GSH_WEAK_GO(int, team_n_pes, (shmem_team_t team), (team))
GSH_WEAK_GO(int, team_get_config, (shmem_team_t team, long config_mask, shmem_team_config_t *config), (team, config_mask, config))
GSH_WEAK_GO(int, team_translate_pe, (shmem_team_t src_team, int src_pe, shmem_team_t dest_team), (src_team, src_pe, dest_team))
GSH_WEAK_GO(int, team_split_strided,
            (shmem_team_t parent_team, int start, int stride, int size, const shmem_team_config_t *config, long config_mask,
             shmem_team_t *new_team),
            (parent_team, start, stride, size, config, config_mask, new_team))
GSH_WEAK_GO(int, team_split_2d,
            (shmem_team_t parent_team, int xrange, const shmem_team_config_t *xaxis_config, long xaxis_mask, shmem_team_t *xaxis_team,
             const shmem_team_config_t *yaxis_config, long yaxis_mask, shmem_team_t *yaxis_team),
            (parent_team, xrange, xaxis_config, xaxis_mask, xaxis_team, yaxis_config, yaxis_mask, yaxis_team))
GSH_WEAK_GO(void, team_destroy, (shmem_team_t team), (team))
