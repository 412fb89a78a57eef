/* PMIx_Spawn and PMIx_Connect (or PMIx_Spawn_nb and PMIx_Connect_nb with the
 * argument "nb"), written against OpenPMIx's
 * <pmix.h> only, run under `cohort run` with cohort's libpmix.so.2
 * (cluster-tests/tests/pmix.rs). The launched job (the parents, 2 ranks or more)
 * checks it has no parent; its rank 0 spawns 2 copies of this program (argument
 * "child") with an environment variable, a working directory and PMIX_MAPBY
 * ppr:2:node (both on the first node server; 4 at ppr:1:node are refused); the
 * children see they were spawned (PMIX_SPAWNED, PMIX_PARENT_ID = parent rank 0, a
 * PMIX_PROC), their job's size, the variable and the directory. Parents and
 * children then connect over both namespaces (as Open MPI's MPI_Comm_spawn does:
 * each side names its own job's and the other job's wildcard), read each other's
 * posted data and job-level keys (PMIX_NODE_RANK and PMIX_NODE_SIZE spanning both
 * jobs among them), and disconnect; rank 0, which asked for
 * PMIX_NOTIFY_COMPLETION, then hears PMIX_EVENT_JOB_END for the children. The
 * children's app names a process set (PMIX_PSET_NAME "kids"): every parent hears
 * PMIX_PROCESS_SET_DEFINE with its name and members, finds it (and the children's
 * namespace) with PMIx_Query_info while the children run, the children see it as
 * their PMIX_PSET_NAMES, and every parent hears PMIX_PROCESS_SET_DELETE once they
 * ended, after which the queries no longer list it. Every process checks each answer
 * itself and prints "FAIL rank R: ..." to stderr on a violation (exit 1); on success
 * a parent prints "RESULT parent ..." and a child "RESULT child ...", the same on
 * every process of a side. */
#include <limits.h>
#include <pmix.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmix_check.h"

static pmix_proc_t me;

#define CHILDREN 2
#define WORKDIR "/tmp"

/* A uint32 job-level key of {nspace, rank}. */
static uint32_t job_u32(const char *nspace, pmix_rank_t rank, const char *key)
{
    pmix_status_t rc;
    pmix_proc_t p;
    pmix_value_t *v = NULL;
    PMIX_LOAD_PROCID(&p, nspace, rank);
    OK(PMIx_Get(&p, key, NULL, 0, &v));
    CHECK(v->type == PMIX_UINT32, "%s of %s: type %d", key, nspace, v->type);
    uint32_t x = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    return x;
}

/* The uint32 `key` posted by {nspace, rank}. */
static uint32_t posted(const char *nspace, pmix_rank_t rank, const char *key)
{
    return job_u32(nspace, rank, key);
}

static void put_u32(const char *key, uint32_t x)
{
    pmix_status_t rc;
    pmix_value_t v;
    PMIX_VALUE_LOAD(&v, &x, PMIX_UINT32);
    OK(PMIx_Put(PMIX_GLOBAL, key, &v));
    OK(PMIx_Commit());
}

/* PMIX_SPAWNED of this process: false (or not found) for a launched job. */
static bool spawned(void)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(&me, PMIX_SPAWNED, NULL, 0, &v);
    if (rc == PMIX_ERR_NOT_FOUND) {
        return false;
    }
    CHECK(rc == PMIX_SUCCESS, "PMIX_SPAWNED: %s", PMIx_Error_string(rc));
    CHECK(v->type == PMIX_BOOL, "PMIX_SPAWNED has type %d", v->type);
    bool b = v->data.flag;
    PMIX_VALUE_RELEASE(v);
    return b;
}

/* Connects both jobs (each named by its wildcard, the launched one first), as Open
 * MPI's dpm does after a spawn. */
static atomic_int connect_done;
static pmix_status_t connect_status;

static void on_connected(pmix_status_t status, void *cbdata)
{
    (void)cbdata;
    connect_status = status;
    atomic_store(&connect_done, 1);
}

static void connect_jobs(const char *parents, const char *children, pmix_proc_t both[2], bool nb)
{
    pmix_status_t rc;
    PMIX_LOAD_PROCID(&both[0], parents, PMIX_RANK_WILDCARD);
    PMIX_LOAD_PROCID(&both[1], children, PMIX_RANK_WILDCARD);
    pmix_info_t timeout;
    uint32_t secs = 60;
    PMIX_INFO_LOAD(&timeout, PMIX_TIMEOUT, &secs, PMIX_UINT32);
    if (nb) {
        OK(PMIx_Connect_nb(both, 2, &timeout, 1, on_connected, NULL));
        for (int i = 0; i < 60000 && !atomic_load(&connect_done); i++) {
            usleep(1000);
        }
        CHECK(atomic_load(&connect_done), "PMIx_Connect_nb never called back");
        CHECK(connect_status == PMIX_SUCCESS, "PMIx_Connect_nb: %s",
              PMIx_Error_string(connect_status));
    } else {
        OK(PMIx_Connect(both, 2, &timeout, 1));
    }
    PMIX_INFO_DESTRUCT(&timeout);
}

static atomic_int spawn_done;
static pmix_status_t spawn_status;
static char spawn_nspace[PMIX_MAX_NSLEN + 1];

static void on_spawned(pmix_status_t status, pmix_nspace_t nspace, void *cbdata)
{
    (void)cbdata;
    spawn_status = status;
    PMIX_LOAD_NSPACE(spawn_nspace, nspace);
    atomic_store(&spawn_done, 1);
}

/* PMIX_NOTIFY_COMPLETION: rank 0 hears PMIX_EVENT_JOB_END once every child ended. */
static atomic_int job_end_seen;
static char job_end_nspace[PMIX_MAX_NSLEN + 1];
static int job_end_code = -1;

static void on_job_end(size_t id, pmix_status_t status, const pmix_proc_t *source,
                       pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                       pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)source; (void)results; (void)nresults;
    if (status == PMIX_EVENT_JOB_END) {
        for (size_t i = 0; i < ninfo; i++) {
            if (0 == strcmp(info[i].key, PMIX_NSPACE) && info[i].value.type == PMIX_STRING) {
                snprintf(job_end_nspace, sizeof job_end_nspace, "%s", info[i].value.data.string);
            } else if (0 == strcmp(info[i].key, PMIX_EXIT_CODE) && info[i].value.type == PMIX_INT) {
                job_end_code = info[i].value.data.integer;
            }
        }
        atomic_store(&job_end_seen, 1);
    }
    if (NULL != cbfunc) {
        cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
    }
}

/* PMIX_PROCESS_SET_DEFINE / _DELETE: what the parents were told of set "kids". */
static atomic_int pset_defined, pset_deleted;
static char pset_members[2 * PMIX_MAX_NSLEN + 32];

static void on_pset(size_t id, pmix_status_t status, const pmix_proc_t *source,
                    pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                    pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)source; (void)results; (void)nresults;
    bool kids = false;
    const pmix_data_array_t *members = NULL;
    for (size_t i = 0; i < ninfo; i++) {
        if (0 == strcmp(info[i].key, PMIX_PSET_NAME) && info[i].value.type == PMIX_STRING) {
            kids = 0 == strcmp(info[i].value.data.string, "kids");
        } else if (0 == strcmp(info[i].key, PMIX_PSET_MEMBERS)
                   && info[i].value.type == PMIX_DATA_ARRAY) {
            members = info[i].value.data.darray;
        }
    }
    if (kids && status == PMIX_PROCESS_SET_DEFINE) {
        /* "nspace:rank,nspace:rank" */
        if (NULL != members && members->type == PMIX_PROC) {
            const pmix_proc_t *p = (const pmix_proc_t *)members->array;
            for (size_t i = 0; i < members->size; i++) {
                size_t at = strlen(pset_members);
                snprintf(pset_members + at, sizeof pset_members - at, "%s%s:%u", i ? "," : "",
                         p[i].nspace, p[i].rank);
            }
        }
        atomic_store(&pset_defined, 1);
    } else if (kids && status == PMIX_PROCESS_SET_DELETE) {
        atomic_store(&pset_deleted, 1);
    }
    if (NULL != cbfunc) {
        cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
    }
}

/* Waits (at most 60 s) for `flag`. */
static void wait_for(atomic_int *flag, const char *what)
{
    for (int i = 0; i < 60000 && !atomic_load(flag); i++) {
        usleep(1000);
    }
    CHECK(atomic_load(flag), "no %s within 60 s", what);
}

/* The comma-separated string PMIx_Query_info answers for `key` (malloc'd). */
static char *query_str(const char *key)
{
    pmix_status_t rc;
    pmix_query_t q;
    PMIX_QUERY_CONSTRUCT(&q);
    PMIX_ARGV_APPEND(rc, q.keys, key);
    pmix_info_t *results = NULL;
    size_t nresults = 0;
    OK(PMIx_Query_info(&q, 1, &results, &nresults));
    CHECK(nresults == 1 && results[0].value.type == PMIX_STRING, "%s: %zu results", key,
          nresults);
    char *s = strdup(results[0].value.data.string);
    PMIX_INFO_FREE(results, nresults);
    PMIX_QUERY_DESTRUCT(&q);
    return s;
}

/* Whether the comma-separated `list` has `item`. */
static bool listed(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (0 == strncmp(p, item, n) && (p[n] == ',' || p[n] == '\0')) {
            return true;
        }
    }
    return false;
}

/* Spawns the children from rank 0; returns their namespace in `ns`. */
static void spawn_children(const char *self, bool nb, pmix_nspace_t ns)
{
    pmix_status_t rc;
    pmix_app_t app;
    PMIX_APP_CONSTRUCT(&app);
    char *argv[] = {(char *)self, "child", nb ? "nb" : NULL, NULL};
    char *env[] = {"SPAWN_TEST_WORD=hello", NULL};
    app.cmd = NULL; /* argv[0] is the program */
    app.argv = argv;
    app.env = env;
    app.maxprocs = CHILDREN;
    PMIX_INFO_CREATE(app.info, 2);
    app.ninfo = 2;
    PMIX_INFO_LOAD(&app.info[0], PMIX_WDIR, WORKDIR, PMIX_STRING);
    PMIX_INFO_LOAD(&app.info[1], PMIX_PSET_NAME, "kids", PMIX_STRING);
    pmix_info_t job[2];
    /* ppr:2:node: both children on the first node server */
    PMIX_INFO_LOAD(&job[0], PMIX_MAPBY, "ppr:2:node", PMIX_STRING);
    bool notify = true;
    PMIX_INFO_LOAD(&job[1], PMIX_NOTIFY_COMPLETION, &notify, PMIX_BOOL);
    pmix_status_t end = PMIX_EVENT_JOB_END;
    CHECK(PMIx_Register_event_handler(&end, 1, NULL, 0, on_job_end, NULL, NULL) >= 0,
          "registering a PMIX_EVENT_JOB_END handler");

    /* Bad requests fail before anything starts. */
    pmix_nspace_t none;
    CHECK(PMIx_Spawn(job, 1, NULL, 0, none) == PMIX_ERR_BAD_PARAM, "a spawn of nothing");
    app.maxprocs = 0;
    CHECK(PMIx_Spawn(job, 1, &app, 1, none) == PMIX_ERR_BAD_PARAM, "a spawn of 0 processes");
    app.maxprocs = CHILDREN;
    pmix_info_t need;
    bool yes = true;
    PMIX_INFO_LOAD(&need, "pmix.no.such.directive", &yes, PMIX_BOOL);
    PMIX_INFO_REQUIRED(&need);
    rc = PMIx_Spawn(&need, 1, &app, 1, none);
    CHECK(rc == PMIX_ERR_NOT_SUPPORTED, "a spawn with an unknown required info: %s",
          PMIx_Error_string(rc));
    PMIX_INFO_DESTRUCT(&need);
    /* ppr:1:node holds at most one per node server: 4 do not fit on 1 or 3 */
    pmix_info_t ppr1;
    PMIX_INFO_LOAD(&ppr1, PMIX_MAPBY, "ppr:1:node", PMIX_STRING);
    app.maxprocs = 4;
    rc = PMIx_Spawn(&ppr1, 1, &app, 1, none);
    CHECK(rc == PMIX_ERR_BAD_PARAM, "4 processes at ppr:1:node: %s", PMIx_Error_string(rc));
    app.maxprocs = CHILDREN;
    PMIX_INFO_DESTRUCT(&ppr1);
    /* Cores per process: PE=0 in PMIX_MAPBY, PMIX_CPUS_PER_PROC 0 */
    pmix_info_t pe0;
    PMIX_INFO_LOAD(&pe0, PMIX_MAPBY, "ppr:2:node:PE=0", PMIX_STRING);
    rc = PMIx_Spawn(&pe0, 1, &app, 1, none);
    CHECK(rc == PMIX_ERR_BAD_PARAM, "PE=0: %s", PMIx_Error_string(rc));
    PMIX_INFO_DESTRUCT(&pe0);
    uint32_t zero = 0;
    PMIX_INFO_LOAD(&pe0, PMIX_CPUS_PER_PROC, &zero, PMIX_UINT32);
    rc = PMIx_Spawn(&pe0, 1, &app, 1, none);
    CHECK(rc == PMIX_ERR_BAD_PARAM, "PMIX_CPUS_PER_PROC 0: %s", PMIx_Error_string(rc));
    PMIX_INFO_DESTRUCT(&pe0);
    PMIX_INFO_LOAD(&pe0, PMIX_BINDTO, "sideways", PMIX_STRING);
    rc = PMIx_Spawn(&pe0, 1, &app, 1, none);
    CHECK(rc == PMIX_ERR_BAD_PARAM, "PMIX_BINDTO sideways: %s", PMIx_Error_string(rc));
    PMIX_INFO_DESTRUCT(&pe0);

    if (nb) {
        OK(PMIx_Spawn_nb(job, 2, &app, 1, on_spawned, NULL));
        for (int i = 0; i < 60000 && !atomic_load(&spawn_done); i++) {
            usleep(1000);
        }
        CHECK(atomic_load(&spawn_done), "PMIx_Spawn_nb never called back");
        CHECK(spawn_status == PMIX_SUCCESS, "PMIx_Spawn_nb: %s", PMIx_Error_string(spawn_status));
        PMIX_LOAD_NSPACE(ns, spawn_nspace);
    } else {
        OK(PMIx_Spawn(job, 2, &app, 1, ns));
    }
    app.argv = NULL; /* ours, not malloc'd */
    app.env = NULL;
    PMIX_APP_DESTRUCT(&app);
    PMIX_INFO_DESTRUCT(&job[0]);
    PMIX_INFO_DESTRUCT(&job[1]);
    char expect[PMIX_MAX_NSLEN + 2];
    snprintf(expect, sizeof expect, "%s@", me.nspace);
    CHECK(strncmp(ns, expect, strlen(expect)) == 0, "spawned namespace %s", ns);
}

static int parent(const char *self, bool nb)
{
    pmix_status_t rc;
    uint32_t size = job_u32(me.nspace, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE);
    CHECK(!spawned(), "a launched job says it was spawned");
    pmix_value_t *v = NULL;
    rc = PMIx_Get(&me, PMIX_PARENT_ID, NULL, 0, &v);
    CHECK(rc == PMIX_ERR_NOT_FOUND, "a launched process's parent: %s", PMIx_Error_string(rc));

    pmix_status_t pset_codes[] = {PMIX_PROCESS_SET_DEFINE, PMIX_PROCESS_SET_DELETE};
    CHECK(PMIx_Register_event_handler(pset_codes, 2, NULL, 0, on_pset, NULL, NULL) >= 0,
          "registering a process set handler");
    put_u32("spawn.parent.val", 100 + me.rank);
    pmix_nspace_t ns;
    memset(ns, 0, sizeof ns);
    if (me.rank == 0) {
        spawn_children(self, nb, ns);
        pmix_value_t nv;
        PMIX_VALUE_LOAD(&nv, ns, PMIX_STRING);
        OK(PMIx_Put(PMIX_GLOBAL, "spawn.child.ns", &nv));
        PMIX_VALUE_DESTRUCT(&nv);
        OK(PMIx_Commit());
    }
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    OK(PMIx_Fence(&wild, 1, NULL, 0));
    if (me.rank != 0) {
        pmix_proc_t root;
        PMIX_LOAD_PROCID(&root, me.nspace, 0);
        OK(PMIx_Get(&root, "spawn.child.ns", NULL, 0, &v));
        CHECK(v->type == PMIX_STRING, "spawn.child.ns has type %d", v->type);
        PMIX_LOAD_NSPACE(ns, v->data.string);
        PMIX_VALUE_RELEASE(v);
    }

    /* Every node server started its children before the spawn returned: set "kids"
     * is defined, and this process was told. */
    wait_for(&pset_defined, "PMIX_PROCESS_SET_DEFINE");
    char kids[2 * PMIX_MAX_NSLEN + 32];
    snprintf(kids, sizeof kids, "%s:0,%s:1", ns, ns);
    CHECK(0 == strcmp(pset_members, kids), "set kids has members %s, not %s", pset_members, kids);
    char *names = query_str(PMIX_QUERY_PSET_NAMES);
    CHECK(listed(names, "kids"), "the process sets are %s while the children run", names);
    free(names);
    char *nspaces = query_str(PMIX_QUERY_NAMESPACES);
    CHECK(listed(nspaces, me.nspace) && listed(nspaces, ns), "the namespaces are %s", nspaces);
    free(nspaces);

    /* The children's job, as every node server knows it. */
    uint32_t csize = job_u32(ns, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE);
    CHECK(csize == CHILDREN, "the children's job has %u processes", csize);

    /* The children on this node, as Open MPI asks (PMIX_OPTIONAL): PMIX_LOCAL_PEERS
     * and PMIX_LOCAL_SIZE of their wildcard name exactly the children whose
     * PMIX_NODEID is this process's. */
    uint32_t my_node = job_u32(me.nspace, me.rank, PMIX_NODEID);
    pmix_proc_t cwild;
    PMIX_LOAD_PROCID(&cwild, ns, PMIX_RANK_WILDCARD);
    pmix_info_t optional;
    bool yes = true;
    PMIX_INFO_LOAD(&optional, PMIX_OPTIONAL, &yes, PMIX_BOOL);
    char want[64] = "";
    uint32_t here = 0;
    for (pmix_rank_t r = 0; r < CHILDREN; r++) {
        if (job_u32(ns, r, PMIX_NODEID) == my_node) {
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%u", here ? "," : "", r);
            here++;
        }
    }
    rc = PMIx_Get(&cwild, PMIX_LOCAL_PEERS, &optional, 1, &v);
    if (here == 0) {
        /* None here: not found, never an empty list. */
        CHECK(rc == PMIX_ERR_NOT_FOUND, "no local child, yet local peers: %s",
              PMIx_Error_string(rc));
    } else {
        OK(rc);
        CHECK(v->type == PMIX_STRING, "the children's local peers have type %d", v->type);
        CHECK(0 == strcmp(v->data.string, want), "the children's local peers: %s, not %s",
              v->data.string, want);
        PMIX_VALUE_RELEASE(v);
    }
    PMIX_INFO_DESTRUCT(&optional);
    uint32_t lsize = job_u32(ns, PMIX_RANK_WILDCARD, PMIX_LOCAL_SIZE);
    CHECK(lsize == here, "the children's local size %u, not %u", lsize, here);
    /* PMIX_NODE_SIZE counts both jobs' processes on this node. */
    uint32_t parents_here = job_u32(me.nspace, PMIX_RANK_WILDCARD, PMIX_LOCAL_SIZE);
    uint32_t nsize = job_u32(me.nspace, me.rank, PMIX_NODE_SIZE);
    CHECK(nsize == parents_here + here, "node size %u, not %u parents + %u children", nsize,
          parents_here, here);

    pmix_proc_t both[2];
    connect_jobs(me.nspace, ns, both, nb);
    uint32_t sum = 0;
    for (pmix_rank_t r = 0; r < CHILDREN; r++) {
        uint32_t x = posted(ns, r, "spawn.child.val");
        CHECK(x == 200 + r, "child %u posted %u", r, x);
        sum += x;
        pmix_proc_t c;
        PMIX_LOAD_PROCID(&c, ns, r);
        OK(PMIx_Get(&c, PMIX_LOCAL_RANK, NULL, 0, &v));
        CHECK(v->type == PMIX_UINT16, "a child's local rank has type %d", v->type);
        PMIX_VALUE_RELEASE(v);
    }
    OK(PMIx_Disconnect(both, 2, NULL, 0));
    /* The children end: the set is deleted, their namespace no longer active. */
    wait_for(&pset_deleted, "PMIX_PROCESS_SET_DELETE");
    names = query_str(PMIX_QUERY_PSET_NAMES);
    CHECK(!listed(names, "kids"), "the process sets are %s after the children ended", names);
    free(names);
    nspaces = query_str(PMIX_QUERY_NAMESPACES);
    CHECK(0 == strcmp(nspaces, me.nspace), "the namespaces are %s after the children ended",
          nspaces);
    free(nspaces);
    if (me.rank == 0) {
        wait_for(&job_end_seen, "PMIX_EVENT_JOB_END");
        CHECK(0 == strcmp(job_end_nspace, ns) && job_end_code == 0,
              "PMIX_EVENT_JOB_END for %s, exit code %d", job_end_nspace, job_end_code);
    }
    printf("RESULT parent size=%u children=%u sum=%u\n", size, csize, sum);
    fflush(stdout);
    return 0;
}

static int child(bool nb)
{
    pmix_status_t rc;
    uint32_t size = job_u32(me.nspace, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE);
    CHECK(size == CHILDREN, "PMIX_JOB_SIZE is %u", size);
    CHECK(spawned(), "a spawned process does not know it");
    pmix_value_t *v = NULL;
    OK(PMIx_Get(&me, PMIX_PARENT_ID, NULL, 0, &v));
    CHECK(v->type == PMIX_PROC, "PMIX_PARENT_ID has type %d", v->type);
    pmix_proc_t parent = *v->data.proc;
    PMIX_VALUE_RELEASE(v);
    CHECK(parent.rank == 0, "spawned by rank %u", parent.rank);
    char expect[PMIX_MAX_NSLEN + 2];
    snprintf(expect, sizeof expect, "%s@", parent.nspace);
    CHECK(strncmp(me.nspace, expect, strlen(expect)) == 0, "namespace %s for a spawn of %s",
          me.nspace, parent.nspace);
    /* The same through the job's wildcard. */
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    OK(PMIx_Get(&wild, PMIX_PARENT_ID, NULL, 0, &v));
    CHECK(v->type == PMIX_PROC && v->data.proc->rank == 0, "the job's parent");
    PMIX_VALUE_RELEASE(v);

    const char *word = getenv("SPAWN_TEST_WORD");
    CHECK(word && strcmp(word, "hello") == 0, "SPAWN_TEST_WORD is %s", word ? word : "unset");
    char cwd[PATH_MAX], want[PATH_MAX];
    CHECK(getcwd(cwd, sizeof cwd) && realpath(WORKDIR, want), "getcwd");
    CHECK(strcmp(cwd, want) == 0, "working directory %s", cwd);
    uint32_t psize = job_u32(parent.nspace, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE);
    OK(PMIx_Get(&me, PMIX_PSET_NAMES, NULL, 0, &v));
    CHECK(v->type == PMIX_DATA_ARRAY && v->data.darray->type == PMIX_STRING
              && v->data.darray->size == 1
              && 0 == strcmp(((char **)v->data.darray->array)[0], "kids"),
          "a child's PMIX_PSET_NAMES");
    PMIX_VALUE_RELEASE(v);

    /* PMIX_NODE_RANK spans the jobs: the parents on this node come first, so no two
     * processes of the node share one (what a process picks its GPU by). */
    uint32_t my_node = job_u32(me.nspace, me.rank, PMIX_NODEID);
    uint32_t parents_here = 0, children_here = 0;
    for (pmix_rank_t r = 0; r < psize; r++) {
        parents_here += job_u32(parent.nspace, r, PMIX_NODEID) == my_node;
    }
    for (pmix_rank_t r = 0; r < size; r++) {
        children_here += job_u32(me.nspace, r, PMIX_NODEID) == my_node;
    }
    OK(PMIx_Get(&me, PMIX_LOCAL_RANK, NULL, 0, &v));
    uint16_t lrank = v->data.uint16;
    PMIX_VALUE_RELEASE(v);
    OK(PMIx_Get(&me, PMIX_NODE_RANK, NULL, 0, &v));
    CHECK(v->type == PMIX_UINT16 && v->data.uint16 == parents_here + lrank,
          "node rank %u (type %d), not %u parents here + local rank %u", v->data.uint16, v->type,
          parents_here, lrank);
    PMIX_VALUE_RELEASE(v);
    uint32_t nsize = job_u32(me.nspace, PMIX_RANK_WILDCARD, PMIX_NODE_SIZE);
    CHECK(nsize == parents_here + children_here, "node size %u, not %u + %u", nsize,
          parents_here, children_here);
    /* PMIX_MAPBY ppr:2:node: the two children share the first node server */
    CHECK(children_here == CHILDREN && my_node == 0,
          "ppr:2:node: %u of the children on node %u", children_here, my_node);

    put_u32("spawn.child.val", 200 + me.rank);
    OK(PMIx_Fence(&wild, 1, NULL, 0));
    pmix_proc_t both[2];
    connect_jobs(parent.nspace, me.nspace, both, nb);
    uint32_t sum = 0;
    for (pmix_rank_t r = 0; r < psize; r++) {
        uint32_t x = posted(parent.nspace, r, "spawn.parent.val");
        CHECK(x == 100 + r, "parent %u posted %u", r, x);
        sum += x;
    }
    OK(PMIx_Disconnect(both, 2, NULL, 0));
    printf("RESULT child size=%u parents=%u parent=%u sum=%u\n", size, psize, parent.rank, sum);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    pmix_status_t rc;
    OK(PMIx_Init(&me, NULL, 0));
    CHECK(strncmp(PMIx_Get_version(), "cohort ", 7) == 0, "not cohort's libpmix: %s",
          PMIx_Get_version());
    bool is_child = argc > 1 && strcmp(argv[1], "child") == 0;
    bool nb = argc > 1 && strcmp(argv[argc - 1], "nb") == 0;
    int ret = is_child ? child(nb) : parent(argv[0], nb);
    OK(PMIx_Finalize(NULL, 0));
    return ret;
}
