/* Open MPI's hardware-locality communicators under `cohort run` (cluster-tests/tests/
 * pmix.rs): MPI_Comm_split_type by hardware thread, core, L1/L2/L3 cache, package
 * (OMPI_COMM_TYPE_SOCKET), NUMA node and node (MPI_COMM_TYPE_SHARED). Open MPI
 * derives them from the locality strings (PMIX_LOCALITY_STRING) the node server
 * gives, so each must hold exactly the ranks whose binding shares an object of that
 * kind with this rank's, as hwloc sees the host; unbound ranks (bound to every CPU)
 * share nothing but the node, as under mpirun --bind-to none. One node only.
 * Prints "FAIL rank R: ..." on stderr and exits 1 on a violation; else one RESULT
 * line, the same on every rank. */
#include <hwloc.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CPUS_LEN 256

int main(int argc, char **argv)
{
    int rank = -1, size = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
        fprintf(stderr, "FAIL rank %d: hwloc\n", rank);
        return 1;
    }
    hwloc_bitmap_t mine = hwloc_bitmap_alloc();
    hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_PROCESS);
    char cpus[CPUS_LEN] = {0};
    hwloc_bitmap_list_snprintf(cpus, CPUS_LEN, mine);
    char *all = calloc((size_t)size, CPUS_LEN);
    MPI_Allgather(cpus, CPUS_LEN, MPI_CHAR, all, CPUS_LEN, MPI_CHAR, MPI_COMM_WORLD);
    hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_cpuset(topo);
    int bound = !hwloc_bitmap_isincluded(allowed, mine);

    struct { int split; hwloc_obj_type_t type; const char *name; } kinds[] = {
        {OMPI_COMM_TYPE_HWTHREAD, HWLOC_OBJ_PU, "hwthread"},
        {OMPI_COMM_TYPE_CORE, HWLOC_OBJ_CORE, "core"},
        {OMPI_COMM_TYPE_L1CACHE, HWLOC_OBJ_L1CACHE, "l1"},
        {OMPI_COMM_TYPE_L2CACHE, HWLOC_OBJ_L2CACHE, "l2"},
        {OMPI_COMM_TYPE_L3CACHE, HWLOC_OBJ_L3CACHE, "l3"},
        {OMPI_COMM_TYPE_SOCKET, HWLOC_OBJ_PACKAGE, "socket"},
        {OMPI_COMM_TYPE_NUMA, HWLOC_OBJ_NUMANODE, "numa"},
        {MPI_COMM_TYPE_SHARED, HWLOC_OBJ_MACHINE, "shared"},
    };
    int socket_size = 0;
    hwloc_bitmap_t theirs = hwloc_bitmap_alloc();
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        /* The ranks this one shares an object of this kind with (itself always; every
         * rank of the node for the node; only bound pairs otherwise). */
        int want = 0;
        for (int r = 0; r < size; r++) {
            hwloc_bitmap_list_sscanf(theirs, all + (size_t)r * CPUS_LEN);
            int bound_r = !hwloc_bitmap_isincluded(allowed, theirs);
            int shares = r == rank || kinds[k].type == HWLOC_OBJ_MACHINE;
            int n = hwloc_get_nbobjs_by_type(topo, kinds[k].type);
            for (int i = 0; !shares && bound && bound_r && i < n; i++) {
                hwloc_obj_t o = hwloc_get_obj_by_type(topo, kinds[k].type, (unsigned)i);
                shares = hwloc_bitmap_intersects(o->cpuset, mine) &&
                         hwloc_bitmap_intersects(o->cpuset, theirs);
            }
            want += shares;
        }
        MPI_Comm c;
        int got = 0;
        MPI_Comm_split_type(MPI_COMM_WORLD, kinds[k].split, 0, MPI_INFO_NULL, &c);
        if (c != MPI_COMM_NULL) {
            MPI_Comm_size(c, &got);
            MPI_Comm_free(&c);
        }
        if (got != want) {
            fprintf(stderr, "FAIL rank %d: the %s communicator has %d ranks, not %d (bound to %s)\n",
                    rank, kinds[k].name, got, want, cpus);
            return 1;
        }
        if (kinds[k].split == OMPI_COMM_TYPE_SOCKET) {
            socket_size = got;
        }
    }
    int any_bound = 0;
    MPI_Allreduce(&bound, &any_bound, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    printf("RESULT size=%d bound=%d socket=%d\n", size, any_bound, socket_size);
    fflush(stdout);
    hwloc_bitmap_free(theirs);
    hwloc_bitmap_free(mine);
    free(all);
    hwloc_topology_destroy(topo);
    MPI_Finalize();
    return 0;
}
