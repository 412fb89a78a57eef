/* An MPI program built with Open MPI's mpicc, run under `cohort run` with cohort's
 * libpmix.so.2 in place of OpenPMIx's (cluster-tests/tests/pmix.rs). Each rank
 * checks the allgather itself ("FAIL rank R: ..." on stderr, exit 1) and prints one
 * "RESULT ..." line, the same on every rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank = -1, size = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *all = malloc(sizeof(int) * (size_t)size);
    if (all == NULL) {
        fprintf(stderr, "FAIL rank %d: out of memory\n", rank);
        return 1;
    }
    int mine = 1000 + rank * 7;
    MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    long sum = 0;
    for (int i = 0; i < size; i++) {
        if (all[i] != 1000 + i * 7) {
            fprintf(stderr, "FAIL rank %d: element %d of the allgather is %d\n", rank, i, all[i]);
            return 1;
        }
        sum += all[i];
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("RESULT size=%d sum=%ld\n", size, sum);
    fflush(stdout);
    free(all);
    MPI_Finalize();
    return 0;
}
