/* Group operations that go on without a process that ended (cluster-tests/tests/
 * pmix.rs; 3 ranks on 3 node servers, or on one, where fences over the job meet in
 * shared memory). All three construct group "all"; then rank 2 finalizes and exits.
 * Ranks 0 and 1, without waiting for that:
 *   - fence over the job with PMIX_GROUP_FT_COLLECTIVE: PMIX_SUCCESS once rank 2 ended;
 *   - fence over the job without it: PMIX_PROC_TERMINATED (rank 2 never comes);
 *   - construct "opt" of all three with PMIX_GROUP_OPTIONAL: PMIX_ERR_PARTIAL_SUCCESS
 *     (pmix-standard: "if some members fail to participate") with members 0 and 1;
 *   - construct "ft" of all three with PMIX_GROUP_FT_COLLECTIVE: PMIX_SUCCESS with
 *     members 0 and 1;
 *   - destruct "all" with PMIX_GROUP_FT_COLLECTIVE: PMIX_SUCCESS without rank 2, and
 *     "all-nb" (also of all three) the same with PMIx_Group_destruct_nb.
 * Prints "FAIL rank R: ..." on stderr and exits 1 on a violation; else one RESULT line
 * from ranks 0 and 1. */
#include <pmix.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmix_check.h"

static pmix_proc_t me;

static atomic_int nb_done = 0;
static atomic_int nb_status = 1;

static void on_destructed(pmix_status_t status, void *cbdata)
{
    (void)cbdata;
    atomic_store(&nb_status, status);
    atomic_store(&nb_done, 1);
}

/* The number of members in construct results, or -1. */
static int members_of(pmix_info_t *results, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (0 == strcmp(results[i].key, PMIX_GROUP_MEMBERSHIP) &&
            results[i].value.type == PMIX_DATA_ARRAY) {
            return (int)results[i].value.data.darray->size;
        }
    }
    return -1;
}

/* Constructs `id` of `all` with directive `attr` (true) and a 60 s limit; returns the
 * status, and the membership size in *members. */
static pmix_status_t construct(const char *id, pmix_proc_t *all, const char *attr, int *members)
{
    pmix_info_t info[2];
    bool yes = true;
    int secs = 60;
    PMIX_INFO_LOAD(&info[0], attr, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    pmix_info_t *results = NULL;
    size_t n = 0;
    pmix_status_t rc = PMIx_Group_construct(id, all, 3, info, 2, &results, &n);
    *members = members_of(results, n);
    if (results != NULL) {
        PMIX_INFO_FREE(results, n);
    }
    return rc;
}

int main(void)
{
    pmix_status_t rc;
    OK(PMIx_Init(&me, NULL, 0));
    pmix_proc_t all[3];
    for (int r = 0; r < 3; r++) {
        PMIX_PROC_LOAD(&all[r], me.nspace, (pmix_rank_t)r);
    }
    pmix_info_t *results = NULL;
    size_t n = 0;
    OK(PMIx_Group_construct("all", all, 3, NULL, 0, &results, &n));
    PMIX_INFO_FREE(results, n);
    OK(PMIx_Group_construct("all-nb", all, 3, NULL, 0, &results, &n));
    PMIX_INFO_FREE(results, n);
    if (me.rank == 2) {
        OK(PMIx_Finalize(NULL, 0));
        return 0;
    }

    pmix_info_t ft;
    bool yes = true;
    PMIX_INFO_LOAD(&ft, PMIX_GROUP_FT_COLLECTIVE, &yes, PMIX_BOOL);
    pmix_proc_t job;
    PMIX_PROC_LOAD(&job, me.nspace, PMIX_RANK_WILDCARD);
    OK(PMIx_Fence(&job, 1, &ft, 1));
    rc = PMIx_Fence(&job, 1, NULL, 0);
    CHECK(rc == PMIX_PROC_TERMINATED, "a fence without FT_COLLECTIVE: %s",
          PMIx_Error_string(rc));

    int members = 0;
    rc = construct("opt", all, PMIX_GROUP_OPTIONAL, &members);
    CHECK(rc == PMIX_ERR_PARTIAL_SUCCESS && members == 2,
          "optional construct: %s, %d members", PMIx_Error_string(rc), members);
    rc = construct("ft", all, PMIX_GROUP_FT_COLLECTIVE, &members);
    CHECK(rc == PMIX_SUCCESS && members == 2, "fault-tolerant construct: %s, %d members",
          PMIx_Error_string(rc), members);
    OK(PMIx_Group_destruct("all", &ft, 1));
    OK(PMIx_Group_destruct_nb("all-nb", &ft, 1, on_destructed, NULL));
    for (int i = 0; i < 60000 && !atomic_load(&nb_done); i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    CHECK(atomic_load(&nb_done) && atomic_load(&nb_status) == PMIX_SUCCESS,
          "fault-tolerant PMIx_Group_destruct_nb: done %d, %s", atomic_load(&nb_done),
          PMIx_Error_string(atomic_load(&nb_status)));

    printf("RESULT ft fence=ok strict_fence=terminated optional=partial ft_construct=2 ft_destruct=ok\n");
    fflush(stdout);
    OK(PMIx_Finalize(NULL, 0));
    return 0;
}
