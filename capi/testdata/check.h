/* check.h: CHECK of the C test programs: a failed condition ends the job
 * with status 1 and a line naming the PE, the place and the condition. */
#ifndef GSH_TEST_CHECK_H
#define GSH_TEST_CHECK_H
#include <shmem.h>
#include <stdio.h>

#define CHECK(c)                                                                                            \
    do {                                                                                                    \
        if (!(c)) {                                                                                         \
            fprintf(stderr, "PE %d: %s:%d: %s: check failed: %s\n", shmem_my_pe(), __FILE__, __LINE__, __func__, #c); \
            shmem_global_exit(1);                                                                           \
        }                                                                                                   \
    } while (0)

#endif
