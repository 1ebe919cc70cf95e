/* globalexit: PE 1 writes a line (buffered: stdout is a pipe) and calls
 * shmem_global_exit(7) while the others wait forever; the job ends with 7
 * and the line is out (the streams are flushed, as by exit). */
#include <shmem.h>
#include <stdio.h>

static int never;

int main(void) {
    shmem_init();
    if (shmem_my_pe() == 1) {
        printf("PE 1 ends the job\n");
        shmem_global_exit(7);
    }
    shmem_int_wait_until(&never, SHMEM_CMP_EQ, 1);
    printf("PE %d: the wait returned\n", shmem_my_pe());
    return 0;
}
