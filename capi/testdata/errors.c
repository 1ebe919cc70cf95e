/* errors: the bad argument argv[1] names, made by PE 0 while the others
 * wait in a barrier; the job must end with one line naming the routine
 * called and the argument (see TestCErrors). */
#include <shmem.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    shmem_init();
    const char *what = argc > 1 ? argv[1] : "";
    long *x = shmem_malloc(4 * sizeof(long));
    long local = 0, src[4] = {0, 0, 0, 0};
    int n = shmem_n_pes();
    if (shmem_my_pe() == 0) {
        if (strcmp(what, "pe") == 0) shmem_long_p(x, 1, n + 5);
        if (strcmp(what, "ctx-pe") == 0 || strcmp(what, "destroyed") == 0) {
            shmem_ctx_t ctx;
            if (shmem_ctx_create(0, &ctx) != 0) return 2;
            if (strcmp(what, "destroyed") == 0) shmem_ctx_destroy(ctx);
            shmem_ctx_long_atomic_add(ctx, x, 1, n);
        }
        if (strcmp(what, "stride") == 0) shmem_long_iput(x, src, 0, 1, 2, 0);
        if (strcmp(what, "cmp") == 0) shmem_long_test(x, 42, 0);
        if (strcmp(what, "align") == 0) shmem_long_atomic_add((long *)((char *)x + 4), 1, 0);
        if (strcmp(what, "symmetric") == 0) shmem_long_put(&local, src, 1, 0);
        if (strcmp(what, "putmem") == 0) shmem_putmem(&local, src, 8, 0);
        if (strcmp(what, "signal-cmp") == 0) shmem_signal_wait_until((uint64_t *)x, 42, 0);
        if (strcmp(what, "free") == 0) shmem_free(&local);
        if (strcmp(what, "session") == 0) shmem_ctx_session_start(SHMEM_CTX_DEFAULT, 0x40, NULL, 0);
        printf("errors: %s was not an error\n", what);
        return 3;
    }
    shmem_barrier_all();
    return 0;
}
