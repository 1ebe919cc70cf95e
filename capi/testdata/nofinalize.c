/* nofinalize: programs that end without shmem_finalize, as those written
 * for start_pes do (it came before shmem_finalize) and as those that
 * exit(EXIT_SUCCESS) on a path that skips it (OSU's --help): the library
 * finalizes them on the way out. Every PE but 0 ends at once; PE 0 then
 * reads each one's heap and static data, which must still be there (a PE
 * that ends waits for the others in the finalize), and ends last. With
 * the argument "exit" the program starts with shmem_init and ends with
 * exit; otherwise with start_pes and a return from main, using the
 * deprecated names throughout. */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static long sdata;

static void leave(int use_exit) {
    if (use_exit) exit(EXIT_SUCCESS);
}

int main(int argc, char **argv) {
    int use_exit = argc > 1 && strcmp(argv[1], "exit") == 0;
    if (use_exit)
        shmem_init();
    else
        start_pes(0);
    int me = _my_pe(), n = _num_pes();
    long *h = shmalloc(sizeof(long));
    *h = 100 + me;
    sdata = 200 + me;
    shmem_barrier_all();
    if (me != 0) {
        leave(use_exit);
        return 0;
    }
    for (int pe = 1; pe < n; pe++) {
        CHECK(shmem_long_g(h, pe) == 100 + pe);
        CHECK(shmem_long_g(&sdata, pe) == 200 + pe);
    }
    printf("nofinalize: PASS on %d PEs\n", n);
    leave(use_exit);
    return 0;
}
