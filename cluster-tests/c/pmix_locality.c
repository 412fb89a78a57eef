/* Where bound processes sit, as a PMIx client sees it under `cohort run`
 * (cluster-tests/tests/pmix.rs): PMIX_CPUSET and PMIX_LOCALITY_STRING of itself and
 * of every local peer, and PMIx_Get_relative_locality of the two strings, checked
 * against hwloc's own view of the host: two processes share a package, NUMA node,
 * cache, core or hardware thread exactly when one object of that kind holds CPUs of
 * both bindings. Run with argument "bound" (each rank bound, all on one node) or
 * "unbound" (both keys not found). Prints "FAIL rank R: ..." on stderr and exits 1
 * on a violation; else one RESULT line, the same on every rank when each pair of
 * ranks shares the same (2 ranks). */
#include <hwloc.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmix_check.h"

static pmix_proc_t me;

/* `key` of rank `r` as a string (NULL when not found; PMIX_OPTIONAL, as Open MPI asks). */
static char *get_str(pmix_rank_t r, const char *key)
{
    pmix_proc_t p;
    pmix_value_t *v = NULL;
    pmix_info_t opt;
    bool yes = true;
    PMIX_PROC_LOAD(&p, me.nspace, r);
    PMIX_INFO_LOAD(&opt, PMIX_OPTIONAL, &yes, PMIX_BOOL);
    pmix_status_t rc = PMIx_Get(&p, key, &opt, 1, &v);
    if (rc == PMIX_ERR_NOT_FOUND) {
        return NULL;
    }
    CHECK(rc == PMIX_SUCCESS, "get %s of rank %u -> %s", key, r, PMIx_Error_string(rc));
    CHECK(v->type == PMIX_STRING, "%s of rank %u has type %d", key, r, v->type);
    char *s = strdup(v->data.string);
    PMIX_VALUE_RELEASE(v);
    return s;
}

/* What hwloc says processes bound to `a` and `b` share, as pmix_locality_t bits. */
static pmix_locality_t truth(hwloc_topology_t topo, hwloc_const_bitmap_t a, hwloc_const_bitmap_t b)
{
    struct { hwloc_obj_type_t type; pmix_locality_t bit; } kinds[] = {
        {HWLOC_OBJ_PU, PMIX_LOCALITY_SHARE_HWTHREAD},
        {HWLOC_OBJ_CORE, PMIX_LOCALITY_SHARE_CORE},
        {HWLOC_OBJ_L1CACHE, PMIX_LOCALITY_SHARE_L1CACHE},
        {HWLOC_OBJ_L2CACHE, PMIX_LOCALITY_SHARE_L2CACHE},
        {HWLOC_OBJ_L3CACHE, PMIX_LOCALITY_SHARE_L3CACHE},
        {HWLOC_OBJ_PACKAGE, PMIX_LOCALITY_SHARE_PACKAGE},
        {HWLOC_OBJ_NUMANODE, PMIX_LOCALITY_SHARE_NUMA},
    };
    pmix_locality_t loc = PMIX_LOCALITY_SHARE_NODE;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int n = hwloc_get_nbobjs_by_type(topo, kinds[k].type);
        for (int i = 0; i < n; i++) {
            hwloc_obj_t o = hwloc_get_obj_by_type(topo, kinds[k].type, (unsigned)i);
            if (hwloc_bitmap_intersects(o->cpuset, a) && hwloc_bitmap_intersects(o->cpuset, b)) {
                loc |= kinds[k].bit;
                break;
            }
        }
    }
    return loc;
}

int main(int argc, char **argv)
{
    pmix_status_t rc;
    int bound = argc > 1 && 0 == strcmp(argv[1], "bound");
    OK(PMIx_Init(&me, NULL, 0));
    pmix_proc_t wild;
    pmix_value_t *v = NULL;
    PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
    OK(PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v));
    uint32_t size = v->data.uint32;
    PMIX_VALUE_RELEASE(v);

    hwloc_topology_t topo;
    CHECK(hwloc_topology_init(&topo) == 0 && hwloc_topology_load(topo) == 0, "hwloc");
    hwloc_bitmap_t mine = hwloc_bitmap_alloc();
    CHECK(hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_PROCESS) == 0, "hwloc_get_cpubind");

    unsigned shared = 0;
    for (pmix_rank_t r = 0; r < size; r++) {
        char *cpus = get_str(r, PMIX_CPUSET);
        char *loc = get_str(r, PMIX_LOCALITY_STRING);
        if (!bound) {
            CHECK(cpus == NULL && loc == NULL, "unbound rank %u has cpuset %s, locality %s", r,
                  cpus ? cpus : "-", loc ? loc : "-");
            continue;
        }
        CHECK(cpus != NULL && loc != NULL, "bound rank %u: cpuset %s, locality %s", r,
              cpus ? cpus : "not found", loc ? loc : "not found");
        CHECK(0 == strncmp(cpus, "hwloc:", 6), "rank %u cpuset %s", r, cpus);
        hwloc_bitmap_t theirs = hwloc_bitmap_alloc();
        CHECK(hwloc_bitmap_list_sscanf(theirs, cpus + 6) == 0 && !hwloc_bitmap_iszero(theirs),
              "rank %u cpuset %s", r, cpus);
        if (r == me.rank) {
            char *want = NULL;
            hwloc_bitmap_list_asprintf(&want, mine);
            CHECK(hwloc_bitmap_isequal(theirs, mine), "my cpuset says %s, I am bound to %s", cpus,
                  want);
            free(want);
        }
        char *myloc = get_str(me.rank, PMIX_LOCALITY_STRING);
        pmix_locality_t rel = 0;
        OK(PMIx_Get_relative_locality(myloc, loc, &rel));
        pmix_locality_t want = truth(topo, mine, theirs);
        CHECK(rel == want, "rank %u at %s (%s), me at %s: PMIx says %#x, hwloc %#x", r, loc,
              cpus, myloc, rel, want);
        if (r != me.rank) {
            shared = rel;
        }
        free(myloc);
        hwloc_bitmap_free(theirs);
        free(cpus);
        free(loc);
    }
    printf("RESULT size=%u bound=%d shared=%#x\n", size, bound, shared);
    fflush(stdout);
    hwloc_bitmap_free(mine);
    hwloc_topology_destroy(topo);
    OK(PMIx_Finalize(NULL, 0));
    return 0;
}
