/*
 * fence_floor: the cheapest possible 3-node fence on this machine, as a floor for
 * cohort's own (`cohort run --nodes 3 -n 3 cohort-bench fence`).
 *
 * Six processes as in the real job: 3 "ranks" and 3 "node servers". Each rank writes
 * its payload to its server over a Unix socketpair and reads back all payloads; the
 * servers exchange over TCP on 127.0.0.1 (or a socketpair with --unix), either
 * through server 0 (--tree: up, then down; 4 sequential hops like cohort's tree) or
 * directly with each other (--direct: 3 hops). No framing, no event loop, no
 * bookkeeping: a read or write per hop and nothing else. With --spin every process
 * polls (non-blocking reads, sched_yield between looks), as cohort's --spin-us does;
 * without it they block in read(). --work US adds US microseconds of busy CPU to each
 * message a server handles (a stand-in for a real server's per-message cost), which
 * shows how per-message work is amplified when six processes share two cores.
 *
 * --local N measures the 1-node shape instead: one "node server" and N ranks on Unix
 * socketpairs; the server reads every rank's payload (gather) and then writes all of
 * them to each rank (scatter): 2 sequential hops, the floor for `cohort run -n N
 * cohort-bench group` and for a fence through cohortd on one node (--no-shm-fence).
 *
 * Build and run:   cc -O2 -o fence_floor fence_floor.c && ./fence_floor --spin --tree
 *                  (or `make bench-floor`)
 * Prints the mean fence latency over the timed iterations (after the warm-up).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NODES 3
#define WARMUP 100

static int spin;
static int work_us;
static int barrier;

/* Busy CPU for work_us microseconds. */
static void work(void) {
    struct timespec a, b;
    if (!work_us) return;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < work_us);
}

static void die(const char *what) { perror(what); exit(1); }

static void rd(int fd, char *b, int n) {
    for (int at = 0; at < n;) {
        int r = read(fd, b + at, n - at);
        if (r > 0) at += r;
        else if (r < 0 && errno == EAGAIN) sched_yield();
        else if (r < 0 && errno == EINTR) continue;
        else die("read");
    }
}

static void wr(int fd, const char *b, int n) {
    for (int at = 0; at < n;) {
        int r = write(fd, b + at, n - at);
        if (r > 0) at += r;
        else if (r < 0 && errno == EAGAIN) sched_yield();
        else if (r < 0 && errno == EINTR) continue;
        else die("write");
    }
}

static void tcp_pair(int sv[2]) {
    int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (void *)&a, sizeof a) || listen(l, 1) || getsockname(l, (void *)&a, &len))
        die("listen");
    sv[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(sv[0], (void *)&a, sizeof a)) die("connect");
    if ((sv[1] = accept(l, 0, 0)) < 0) die("accept");
    close(l);
    setsockopt(sv[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(sv[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void nonblocking(int fd) {
    if (spin) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Rank loop shared by both shapes: write `size`, read `total`, optionally the barrier. */
static void rank_loop(int fd, char *buf, int size, int total, int iters, int nprocs, const char *shape) {
    struct timespec a, b, t0, t1;
    double timed = 0;
    nonblocking(fd);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int it = 0; it < WARMUP + iters; it++) {
        if (it == WARMUP) clock_gettime(CLOCK_MONOTONIC, &a);
        if (barrier) clock_gettime(CLOCK_MONOTONIC, &t0);
        wr(fd, buf, size);
        rd(fd, buf, total);
        if (barrier) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (it >= WARMUP) timed += (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
            wr(fd, buf, 1);
            rd(fd, buf, nprocs);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (shape)
        printf("fence_floor %s %s%s, work %d us: %d B per rank, %d iterations: %.2f us per fence\n", shape,
               spin ? "spin" : "block", barrier ? " barrier" : "", work_us, size, iters,
               (barrier ? timed : (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / iters);
}

/* The 1-node shape: one server, n ranks; gather then scatter through the server. */
static int local_shape(int n, int size, int iters) {
    int (*sv)[2] = calloc((size_t)n, sizeof *sv);
    char *buf = malloc((size_t)n * size + 1);
    char shape[32];
    if (!sv || !buf) die("malloc");
    memset(buf, 1, (size_t)n * size);
    snprintf(shape, sizeof shape, "local n=%d", n);
    for (int i = 0; i < n; i++)
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i])) die("socketpair");
    for (int p = 0; p <= n; p++) {
        if (fork() != 0) continue;
        if (p < n) {
            rank_loop(sv[p][0], buf, size, n * size, iters, n, p == 0 ? shape : NULL);
            exit(0);
        }
        for (int i = 0; i < n; i++) nonblocking(sv[i][1]);
        for (int it = 0; it < WARMUP + iters; it++)
            for (int op = 0; op < 1 + barrier; op++) {
                int sz = op ? 1 : size;
                for (int i = 0; i < n; i++) {
                    rd(sv[i][1], buf + i * sz, sz);
                    work();
                }
                for (int i = 0; i < n; i++) wr(sv[i][1], buf, n * sz);
            }
        exit(0);
    }
    int status, failed = 0;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status);
    return failed;
}

int main(int argc, char **argv) {
    int local = 0, tree = 1, unix_fabric = 0, iters = 5000, size = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--spin")) spin = 1;
        else if (!strcmp(argv[i], "--tree")) tree = 1;
        else if (!strcmp(argv[i], "--direct")) tree = 0;
        else if (!strcmp(argv[i], "--unix")) unix_fabric = 1;
        else if (!strcmp(argv[i], "--barrier")) barrier = 1;
        else if (!strcmp(argv[i], "--local") && i + 1 < argc) local = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--work") && i + 1 < argc) work_us = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--spin] [--tree|--direct] [--unix] [--barrier] [--local N] [-i N] [--size B] [--work US]\n", argv[0]);
            return 2;
        }
    }
    if (size < 1) size = 1;
    if (local > 0) return local_shape(local, size, iters);
    int rank_pair[NODES][2], fabric[NODES][NODES][2];
    for (int i = 0; i < NODES; i++)
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, rank_pair[i])) die("socketpair");
    for (int i = 0; i < NODES; i++)
        for (int j = i + 1; j < NODES; j++) {
            if (unix_fabric) {
                if (socketpair(AF_UNIX, SOCK_STREAM, 0, fabric[i][j])) die("socketpair");
            } else {
                tcp_pair(fabric[i][j]);
            }
        }
#define PEER(i, j) ((i) < (j) ? fabric[i][j][0] : fabric[j][i][1])
    char *buf = malloc((size_t)NODES * size + 1);
    if (!buf) die("malloc");
    memset(buf, 1, (size_t)NODES * size);
    for (int p = 0; p < 2 * NODES; p++) {
        if (fork() != 0) continue;
        if (p < NODES) { /* rank p */
            char shape[32];
            snprintf(shape, sizeof shape, "%s %s", tree ? "tree" : "direct", unix_fabric ? "unix" : "tcp");
            rank_loop(rank_pair[p][0], buf, size, NODES * size, iters, NODES, p == 0 ? shape : NULL);
            exit(0);
        }
        int d = p - NODES, fd = rank_pair[d][1];
        nonblocking(fd);
        for (int j = 0; j < NODES; j++)
            if (j != d) nonblocking(PEER(d, j));
        for (int it = 0; it < WARMUP + iters; it++)
            for (int op = 0; op < 1 + barrier; op++) {
                int sz = op ? 1 : size;
                rd(fd, buf, sz);
                work();
                if (!tree) {
                    for (int j = 0; j < NODES; j++)
                        if (j != d) wr(PEER(d, j), buf, sz);
                    for (int j = 0; j < NODES; j++)
                        if (j != d) {
                            rd(PEER(d, j), buf + sz, sz);
                            work();
                        }
                } else if (d == 0) {
                    for (int j = 1; j < NODES; j++) {
                        rd(PEER(0, j), buf + sz, sz);
                        work();
                    }
                    for (int j = 1; j < NODES; j++) wr(PEER(0, j), buf, NODES * sz);
                } else {
                    wr(PEER(d, 0), buf, sz);
                    rd(PEER(d, 0), buf, NODES * sz);
                    work();
                }
                wr(fd, buf, NODES * sz);
            }
        exit(0);
    }
    int status, failed = 0;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status);
    return failed;
}
