/*
 * pmix_fence: the same-day reference for `cohort-bench fence` (and a PMIx group
 * construct for `cohort-bench group`), run under another PMIx host, e.g. Open MPI's
 * mpirun or PRRTE's prterun:
 *
 *   cc -O2 -o pmix_fence pmix_fence.c $(pkg-config --cflags --libs pmix)
 *   mpirun -n 4 ./pmix_fence [ITERATIONS] [BYTES]      (or: make bench-reference)
 *
 * Each rank puts BYTES (default 1024) with remote scope and commits; then, like
 * cohort-bench (osu_allgather style), each iteration times one PMIx_Fence that collects
 * data, with an untimed barrier (a fence without data) between iterations; the first
 * 100 are warm-up. Rank 0 prints the median and mean over its iterations in µs. With
 * `group` as the third argument it times PMIx_Group_construct (every rank a leader,
 * a context id asked for) instead, where the host supports groups, and then, timed
 * separately, the PMIx_Group_destruct that follows it (cohort-bench group's
 * `construct` and `destruct` rows).
 */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void check(pmix_status_t rc, const char *what) {
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "pmix_fence: %s failed: %s\n", what, PMIx_Error_string(rc));
        exit(1);
    }
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    int bytes = argc > 2 ? atoi(argv[2]) : 1024;
    int group = argc > 3 && strcmp(argv[3], "group") == 0;
    const int warmup = 100;
    pmix_proc_t me, wild;
    pmix_value_t *val = NULL;
    check(PMIx_Init(&me, NULL, 0), "PMIx_Init");
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    check(PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val), "PMIx_Get(job size)");
    unsigned size = val->data.uint32;
    PMIX_VALUE_RELEASE(val);

    char *payload = malloc(bytes > 0 ? bytes : 1);
    memset(payload, 0xab, bytes);
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = payload;
    v.data.bo.size = bytes;
    check(PMIx_Put(PMIX_REMOTE, "bench.payload", &v), "PMIx_Put");
    check(PMIx_Commit(), "PMIx_Commit");

    pmix_info_t collect;
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, NULL, PMIX_BOOL);
    pmix_info_t ctxid;
    PMIX_INFO_LOAD(&ctxid, PMIX_GROUP_ASSIGN_CONTEXT_ID, NULL, PMIX_BOOL);
    pmix_proc_t *all = calloc(size, sizeof *all);
    for (unsigned r = 0; r < size; r++) PMIX_LOAD_PROCID(&all[r], me.nspace, r);

    double *t = malloc(sizeof(double) * iters);
    double *d = malloc(sizeof(double) * iters);
    for (int i = 0; i < iters + warmup; i++) {
        double t0 = now_us(), dt, dd = 0;
        if (group) {
            pmix_info_t *results = NULL;
            size_t nresults = 0;
            check(PMIx_Group_construct("pmix_fence.g", all, size, &ctxid, 1, &results, &nresults),
                  "PMIx_Group_construct");
            dt = now_us() - t0;
            int have_ctxid = 0;
            for (size_t k = 0; k < nresults; k++)
                if (PMIX_CHECK_KEY(&results[k], PMIX_GROUP_CONTEXT_ID)) have_ctxid = 1;
            if (!have_ctxid) {
                fprintf(stderr, "pmix_fence: PMIx_Group_construct returned no context id\n");
                exit(1);
            }
            if (results) PMIX_INFO_FREE(results, nresults);
            double t1 = now_us();
            check(PMIx_Group_destruct("pmix_fence.g", NULL, 0), "PMIx_Group_destruct");
            dd = now_us() - t1;
        } else {
            check(PMIx_Fence(&wild, 1, &collect, 1), "PMIx_Fence(collect)");
            dt = now_us() - t0;
        }
        if (i >= warmup) {
            t[i - warmup] = dt;
            d[i - warmup] = dd;
        }
        check(PMIx_Fence(&wild, 1, NULL, 0), "PMIx_Fence(barrier)");
    }
    qsort(t, iters, sizeof *t, cmp);
    qsort(d, iters, sizeof *d, cmp);
    double sum = 0;
    for (int i = 0; i < iters; i++) sum += t[i];
    if (me.rank == 0) {
        printf("pmix_fence %s: %u ranks, %d B per rank, %d iterations: median %.2f us, mean %.2f us",
               group ? "group construct (context id)" : "fence (collect data)", size, bytes,
               iters, t[iters / 2], sum / iters);
        if (group) printf("; destruct median %.2f us", d[iters / 2]);
        printf("\n");
    }
    free(t);
    free(d);
    free(all);
    free(payload);
    PMIx_Finalize(NULL, 0);
    return 0;
}
