/* An Open MPI program that meets itself by name: the lower half of the ranks opens a
 * port and publishes it (MPI_Publish_name), the upper half looks it up
 * (MPI_Lookup_name) and connects (MPI_Comm_accept / MPI_Comm_connect), then both
 * halves reduce over the intercommunicator. Under `cohort run --pmix`, Open MPI does
 * this with PMIx_Publish, PMIx_Lookup (waiting) and PMIx_Connect on cohort's
 * libpmix.so.2 (cluster-tests/tests/pmix.rs); Open MPI's own exchanges for the
 * connection and its context id publish first-read values and wait for them. It also looks up a name nobody
 * published, which must fail. Every rank prints one "RESULT ..." line, the same on
 * every rank when all went well, or "FAIL rank R: ..." to stderr (exit 1). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int rank;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL rank %d: ", rank);                       \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);             \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

int main(int argc, char **argv)
{
    int size, half_rank, remote, sum = 0, expect = 0;
    MPI_Comm half, inter;
    char port[MPI_MAX_PORT_NAME] = {0};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2 && size % 2 == 0, "needs an even number of ranks, got %d", size);
    int server = rank < size / 2;
    MPI_Comm_split(MPI_COMM_WORLD, server, rank, &half);
    MPI_Comm_rank(half, &half_rank);
    if (server) {
        if (half_rank == 0) {
            MPI_Open_port(MPI_INFO_NULL, port);
            MPI_Publish_name("cohort-accept-test", MPI_INFO_NULL, port);
        }
        /* MPI_Lookup_name does not wait: the name is published before this. */
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, half, &inter);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        if (half_rank == 0) {
            char none[MPI_MAX_PORT_NAME];
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            CHECK(MPI_Lookup_name("cohort-nobody-published-this", MPI_INFO_NULL, none) != MPI_SUCCESS,
                  "an unpublished name was found: %s", none);
            CHECK(MPI_Lookup_name("cohort-accept-test", MPI_INFO_NULL, port) == MPI_SUCCESS,
                  "lookup of the published port");
        }
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, half, &inter);
    }
    MPI_Comm_remote_size(inter, &remote);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, inter);
    for (int r = server ? size / 2 : 0; r < (server ? size : size / 2); r++) {
        expect += r;
    }
    CHECK(remote == size / 2, "remote size %d", remote);
    CHECK(sum == expect, "sum of the remote ranks %d, expected %d", sum, expect);
    MPI_Comm_disconnect(&inter);
    if (server && half_rank == 0) {
        MPI_Unpublish_name("cohort-accept-test", MPI_INFO_NULL, port);
        MPI_Close_port(port);
    }
    printf("RESULT size=%d remote=%d sums=ok\n", size, remote);
    MPI_Comm_free(&half);
    MPI_Finalize();
    return 0;
}
