/* The checks of the PMIx test programs in this directory: CHECK(cond, fmt, ...)
 * prints "FAIL rank R: ..." (R from the program's `me`, its pmix_proc_t) with the
 * place on stderr and exits 1 when `cond` is false; OK(call) checks that a PMIx call
 * (assigned to the program's `rc`) succeeded. */
#ifndef COHORT_PMIX_CHECK_H
#define COHORT_PMIX_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL rank %u: ", me.rank);                    \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);             \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

#define OK(call) CHECK((rc = (call)) == PMIX_SUCCESS, "%s -> %s (%d)", #call, PMIx_Error_string(rc), rc)

#endif
