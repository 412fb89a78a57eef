/* MPI_Comm_spawn of Open MPI 4.1 under `cohort run --pmix` (cluster-tests/tests/pmix.rs):
 * the launched job (the parents) spawns 2 copies of this program; the children find
 * their parents with MPI_Comm_get_parent. Over the intercommunicator both sides
 * reduce (MPI_Allreduce: each side gets the sum of the other side's values) and the
 * parents' rank 0 sends each child a message the child answers; then both sides
 * disconnect (MPI_Comm_disconnect) and finalize. Open MPI does the spawn with
 * PMIx_Spawn, then publish/lookup and PMIx_Connect between the two namespaces, on
 * cohort's libpmix.so.2. Every process prints one "RESULT ..." line ("RESULT parent
 * ..." or "RESULT child ..."), the same on every process of a side when all went
 * well, or "FAIL rank R: ..." to stderr (exit 1). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHILDREN 2

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
    int size, remote, sum = 0;
    MPI_Comm parent, inter;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_parent(&parent);
    int is_child = parent != MPI_COMM_NULL;
    if (is_child) {
        CHECK(argc > 1 && strcmp(argv[1], "child") == 0, "a child without its argument");
        CHECK(size == CHILDREN, "the children's MPI_COMM_WORLD has %d processes", size);
        inter = parent;
    } else {
        char *args[] = {"child", NULL};
        int errcodes[CHILDREN];
        MPI_Comm_spawn(argv[0], args, CHILDREN, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                       errcodes);
        for (int i = 0; i < CHILDREN; i++) {
            CHECK(errcodes[i] == MPI_SUCCESS, "child %d: error %d", i, errcodes[i]);
        }
    }
    MPI_Comm_remote_size(inter, &remote);
    CHECK(remote == (is_child ? remote : CHILDREN), "remote size %d", remote);

    /* Parents contribute 1000 + rank, children 10 + rank: each side gets the other's
     * sum. */
    int mine = is_child ? 10 + rank : 1000 + rank;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, inter);
    int expect = 0;
    for (int r = 0; r < remote; r++) {
        expect += is_child ? 1000 + r : 10 + r;
    }
    CHECK(sum == expect, "allreduce over the intercommunicator gave %d, not %d", sum, expect);

    /* The parents' rank 0 and each child: a question and its answer. */
    int echoed = 0;
    if (!is_child && rank == 0) {
        for (int c = 0; c < CHILDREN; c++) {
            int q = 7 * (c + 1), a = 0;
            MPI_Send(&q, 1, MPI_INT, c, 1, inter);
            MPI_Recv(&a, 1, MPI_INT, c, 2, inter, MPI_STATUS_IGNORE);
            CHECK(a == q + 1, "child %d answered %d to %d", c, a, q);
            echoed++;
        }
    } else if (is_child) {
        int q = 0, a;
        MPI_Recv(&q, 1, MPI_INT, 0, 1, inter, MPI_STATUS_IGNORE);
        CHECK(q == 7 * (rank + 1), "child %d was asked %d", rank, q);
        a = q + 1;
        MPI_Send(&a, 1, MPI_INT, 0, 2, inter);
        echoed = 1;
    }
    /* Every process of a side reports the same line. */
    MPI_Allreduce(MPI_IN_PLACE, &echoed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

    MPI_Comm_disconnect(&inter);
    if (is_child) {
        printf("RESULT child size=%d parents=%d sum=%d echoed=%d\n", size, remote, sum, echoed);
    } else {
        printf("RESULT parent size=%d children=%d sum=%d echoed=%d\n", size, remote, sum,
               echoed);
    }
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
