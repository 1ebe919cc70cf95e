/* badpe: a put to a PE outside the job ends the job with a message naming it. */
#include <shmem.h>

int main(void) {
    shmem_init();
    long *x = shmem_malloc(sizeof(long));
    shmem_long_p(x, 1, shmem_n_pes() + 5);
    shmem_finalize();
    return 0;
}
