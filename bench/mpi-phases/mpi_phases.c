/* bench/mpi-phases/mpi_phases.c: where an Open MPI job that spawns spends its time,
 * per process (bench/mpi-phases/run.sh runs it under `cohort run --pmix` and under
 * mpirun). A launched rank times its MPI_Init, then MPI_Comm_spawn of 2 copies of
 * this program and MPI_Comm_disconnect; a spawned one times its MPI_Init (which
 * includes connecting to its parents) and its disconnect. Each prints one line:
 *   PHASES parent RANK init MS spawn MS disconnect MS
 *   PHASES child RANK init MS disconnect MS
 * Times are differences of CLOCK_MONOTONIC within the process, from the start of
 * main (not from the process's exec). */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    double t0 = now_ms();
    MPI_Init(&argc, &argv);
    double t1 = now_ms();
    int rank;
    MPI_Comm parent;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) {
        MPI_Comm inter;
        MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                       MPI_ERRCODES_IGNORE);
        double t2 = now_ms();
        MPI_Comm_disconnect(&inter);
        double t3 = now_ms();
        printf("PHASES parent %d init %.1f spawn %.1f disconnect %.1f\n", rank, t1 - t0,
               t2 - t1, t3 - t2);
    } else {
        MPI_Comm_disconnect(&parent);
        double t2 = now_ms();
        printf("PHASES child %d init %.1f disconnect %.1f\n", rank, t1 - t0, t2 - t1);
    }
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
