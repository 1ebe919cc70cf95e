// cxx: shmem.h from C++ (compiled with -std=c++11 -Wall -Wextra -Werror
// -pedantic, linked with goshc++): no C11 generics there, so the typed and
// context forms of each family, with C linkage.
#include <shmem.h>

#include <cstdio>

#include "check.h"

static long counter;
static uint64_t sig;

int main() {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n;
    long *x = static_cast<long *>(shmem_malloc(4 * sizeof(long)));
    long src[4] = {me, me + 1, me + 2, me + 3};
    shmem_long_put(x, src, 4, right);
    shmem_ctx_long_put_signal(SHMEM_CTX_DEFAULT, x, src, 4, &sig, 1, SHMEM_SIGNAL_SET, right);
    shmem_uint64_wait_until(&sig, SHMEM_CMP_EQ, 1);
    CHECK(x[3] == (me + n - 1) % n + 3);
    shmem_long_atomic_inc(&counter, 0);
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0);
    shmem_ctx_long_atomic_add(ctx, &counter, 2, 0);
    shmem_ctx_quiet(ctx);
    shmem_ctx_destroy(ctx);
    shmem_barrier_all();
    long *s = static_cast<long *>(shmem_malloc(sizeof(long))), *d = static_cast<long *>(shmem_malloc(sizeof(long)));
    *s = me;
    CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, d, s, 1) == 0 && *d == static_cast<long>(n) * (n - 1) / 2);
    if (me == 0) CHECK(counter == 3L * n);
    int initialized = 0;
    shmem_query_initialized(&initialized);
    CHECK(initialized == 1);
    char name[SHMEM_MAX_NAME_LEN];
    shmem_info_get_name(name);
    shmem_barrier_all();
    if (me == 0) std::printf("cxx: PASS on %d PEs (%s)\n", n, name);
    shmem_finalize();
    return 0;
}
