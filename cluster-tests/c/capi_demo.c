/*
 * A rank program in C against include/cohort.h (run by cluster-tests/tests/capi.rs
 * under `cohort run`): data exchange, a whole-job fence, a group with a context id,
 * a get by group rank, a GROUP_LEFT event, the failure views, a typed error, and
 * destruct; group info given to constructs, invites and joins and read back from
 * every member; an event's info; the non-blocking forms of each collective; a spawn of
 * 2 copies of this program (argument "child"; blocking with 4 ranks, non-blocking
 * otherwise), which find their parent, connect with the launched job over both jobs'
 * wildcards and read its data (and it theirs); the children form process set
 * "capi-kids" while they run (the session's sets and namespaces list it and them,
 * until COHORT_EVENT_PROCESS_SET_DELETE); local-only groups of each node server's
 * ranks; a fault-tolerant fence and destruct once the last rank ended. Any violation
 * prints "FAIL rank R: …" and exits 1; success prints "RESULT members=N ctx=C
 * failed=F conn=… spawned=2" (equal on every rank that stays in the group), and each
 * child "SPAWNED …".
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cohort.h"

static uint32_t me;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            fprintf(stderr, "FAIL rank %u: ", me);         \
            fprintf(stderr, __VA_ARGS__);                  \
            fprintf(stderr, " (last error: %s)\n", cohort_last_error()); \
            exit(1);                                       \
        }                                                  \
    } while (0)

#define OK(call) \
    do { int rc_ = (call); CHECK(rc_ == COHORT_SUCCESS, "%s: %s", #call, cohort_status_name(rc_)); } while (0)

static cohort_proc_t proc_of(const char *nspace, uint32_t rank) {
    cohort_proc_t p;
    memset(&p, 0, sizeof p);
    snprintf(p.nspace, sizeof p.nspace, "%s", nspace);
    p.rank = rank;
    return p;
}

/* What a non-blocking call left for the thread waiting on it. */
struct wait {
    volatile int done;
    int status;
    size_t nmembers;
    size_t ninfo;
    uint64_t ctx;
    char text[64];
};

static void wait_for(struct wait *w, const char *what) {
    for (int i = 0; i < 60000 && !__atomic_load_n(&w->done, __ATOMIC_SEQ_CST); i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    CHECK(w->done, "%s never completed", what);
    CHECK(w->status == COHORT_SUCCESS, "%s: %s", what, cohort_status_name(w->status));
}

static void op_done(int status, void *cbdata) {
    struct wait *w = cbdata;
    w->status = status;
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
}

static void group_done(int status, const cohort_group_t *g, void *cbdata) {
    struct wait *w = cbdata;
    w->status = status;
    if (g != NULL) {
        w->nmembers = g->nmembers;
        w->ninfo = g->ninfo;
        w->ctx = g->has_context_id ? g->context_id : 0;
    }
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
}

static void failed_done(int status, const cohort_failed_t *f, void *cbdata) {
    struct wait *w = cbdata;
    w->status = status;
    if (f != NULL)
        w->nmembers = f->nfailed;
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
}

static void connected(int status, const char *nspace, uint32_t rank, void *cbdata) {
    struct wait *w = cbdata;
    w->status = status;
    w->ctx = rank;
    snprintf(w->text, sizeof w->text, "%s", nspace);
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
}

static void spawned_done(int status, const char *nspace, void *cbdata) {
    struct wait *w = cbdata;
    w->status = status;
    snprintf(w->text, sizeof w->text, "%s", nspace);
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
}

static void value_done(int status, const cohort_value_t *v, void *cbdata) {
    struct wait *w = cbdata;
    w->status = status;
    if (v != NULL && v->type == COHORT_VALUE_STRING)
        snprintf(w->text, sizeof w->text, "%s", v->str);
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
}

static void lookup_done(int status, const cohort_published_t *found, size_t nfound,
                        void *cbdata) {
    struct wait *w = cbdata;
    w->status = status;
    w->nmembers = nfound;
    if (nfound == 1 && found[0].value.type == COHORT_VALUE_U64) {
        w->ctx = found[0].value.u64;
        w->ninfo = found[0].publisher.rank;
    }
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
}

/* A one-entry info list holding a u64. */
static cohort_info_t u64_info(const char *key, uint64_t value) {
    cohort_info_t i;
    memset(&i, 0, sizeof i);
    i.key = (char *)key;
    i.value.type = COHORT_VALUE_U64;
    i.value.u64 = value;
    return i;
}

/* Invitees accept "c-inv" from the GROUP_INVITED handler, with the non-blocking join
 * carrying their group info, and decline "c-inv2". */
static cohort_client_t *client_for_handlers;
static struct wait joined, declined;
static volatile int invitations;

static void on_invited(int code, const cohort_proc_t *source, const cohort_proc_t *affected,
                       size_t naffected, const char *group, void *cbdata) {
    (void)affected;
    (void)naffected;
    (void)cbdata;
    if (code != COHORT_EVENT_GROUP_INVITED || group == NULL)
        return;
    int accept = strcmp(group, "c-inv") == 0;
    if (!accept && strcmp(group, "c-inv2") != 0)
        return;
    __atomic_add_fetch(&invitations, 1, __ATOMIC_SEQ_CST);
    struct wait *w = accept ? &joined : &declined;
    cohort_info_t mine = u64_info("joiner", me);
    int rc = cohort_group_join_nb(client_for_handlers, group, source, accept, &mine, 1, 60000,
                                  group_done, w);
    if (rc != COHORT_SUCCESS)
        op_done(rc, w);
}

#define APP_EVENT 5001
static volatile int app_events;

/* The whole event: rank 0's notify to group "c-boot" carrying "payload" = 4242. */
static void on_app_event(const cohort_event_t *e, void *cbdata) {
    (void)cbdata;
    if (e->code != APP_EVENT || e->source.rank != 0)
        return;
    for (size_t i = 0; i < e->ninfo; i++)
        if (strcmp(e->info[i].key, "payload") == 0 && e->info[i].value.type == COHORT_VALUE_U64 &&
            e->info[i].value.u64 == 4242)
            __atomic_add_fetch(&app_events, 1, __ATOMIC_SEQ_CST);
}

static volatile int left_events;
static char left_group[COHORT_MAX_NSLEN + 1];
static uint32_t left_rank = UINT32_MAX;

static void on_left(int code, const cohort_proc_t *source, const cohort_proc_t *affected,
                    size_t naffected, const char *group, void *cbdata) {
    (void)source;
    (void)cbdata;
    if (code != COHORT_EVENT_GROUP_LEFT || naffected != 1 || group == NULL)
        return;
    snprintf(left_group, sizeof left_group, "%s", group);
    left_rank = affected[0].rank;
    __atomic_add_fetch(&left_events, 1, __ATOMIC_SEQ_CST);
}

#define SPAWNED 2

/* COHORT_EVENT_PROCESS_SET_DELETE of the children's set. */
static volatile int kids_deleted;

static void on_set_deleted(const cohort_event_t *e, void *cbdata) {
    (void)cbdata;
    for (size_t i = 0; i < e->ninfo; i++)
        if (strcmp(e->info[i].key, "pmix.pset.nm") == 0 &&
            e->info[i].value.type == COHORT_VALUE_STRING &&
            strcmp(e->info[i].value.str, "capi-kids") == 0)
            __atomic_store_n(&kids_deleted, 1, __ATOMIC_SEQ_CST);
}

/* Whether `list` (n strings) is exactly `a` then `b` (b NULL: only a). */
static int listed(char **list, size_t n, const char *a, const char *b) {
    return n == (b ? 2u : 1u) && strcmp(list[0], a) == 0 && (!b || strcmp(list[1], b) == 0);
}

/* Connects the launched job and the spawned one (each by its wildcard). */
static void connect_jobs(cohort_client_t *c, const char *parents, const char *children,
                         char *conn_ns) {
    cohort_proc_t both[2] = {proc_of(parents, COHORT_RANK_WILDCARD),
                             proc_of(children, COHORT_RANK_WILDCARD)};
    cohort_connect_opts_t copts;
    memset(&copts, 0, sizeof copts);
    copts.connect_id = "c-spawn";
    copts.timeout_ms = 60000;
    OK(cohort_connect(c, both, 2, &copts, conn_ns, NULL));
}

/* A spawned copy: its parent, job, environment and directory, then the connect. */
static int child_main(cohort_client_t *c) {
    me = cohort_rank(c);
    const char *ns = cohort_nspace(c);
    CHECK(cohort_size(c) == SPAWNED, "the spawned job has %u processes", cohort_size(c));
    cohort_proc_t parent;
    OK(cohort_parent(c, &parent));
    char prefix[COHORT_MAX_NSLEN + 2];
    snprintf(prefix, sizeof prefix, "%s@", parent.nspace);
    CHECK(parent.rank == 0 && strncmp(ns, prefix, strlen(prefix)) == 0,
          "spawned by %s:%u into %s", parent.nspace, parent.rank, ns);
    const char *word = getenv("CAPI_SPAWN_WORD");
    CHECK(word != NULL && strcmp(word, "hi") == 0, "CAPI_SPAWN_WORD is %s", word ? word : "unset");
    char cwd[256];
    CHECK(getcwd(cwd, sizeof cwd) != NULL && strcmp(cwd, "/") == 0, "working directory %s", cwd);
    char mine[32];
    snprintf(mine, sizeof mine, "child-%u", me);
    OK(cohort_put_string(c, COHORT_SCOPE_GLOBAL, "child-word", mine));
    OK(cohort_commit(c));
    char conn_ns[COHORT_MAX_NSLEN + 1];
    connect_jobs(c, parent.nspace, ns, conn_ns);
    cohort_value_t v;
    OK(cohort_get(c, &parent, "endpoint", 10000, &v));
    CHECK(v.type == COHORT_VALUE_STRING && strcmp(v.str, "ep-0") == 0, "the parent's endpoint");
    printf("SPAWNED size=%u parent=%u ep=%s\n", cohort_size(c), parent.rank, v.str);
    cohort_value_free(&v);
    fflush(stdout);
    OK(cohort_disconnect(c, conn_ns, 60000));
    OK(cohort_finalize(c));
    return 0;
}

/* The launched job's side: rank 0 spawns, everyone connects with the children and
 * reads their data. */
static void spawn_children(cohort_client_t *c, const char *self) {
    const char *ns = cohort_nspace(c);
    uint32_t n = cohort_size(c);
    cohort_proc_t parent;
    int rc = cohort_parent(c, &parent);
    CHECK(rc == COHORT_ERR_NOT_FOUND, "a launched job's parent: %s", cohort_status_name(rc));
    int deleted[1] = {COHORT_EVENT_PROCESS_SET_DELETE};
    uint64_t deleted_handler = 0;
    OK(cohort_register_event_callback(c, deleted, 1, on_set_deleted, NULL, &deleted_handler));
    if (me == 0) {
        const char *args[] = {self, "child"};
        const char *env[] = {"CAPI_SPAWN_WORD=hi"};
        cohort_spawn_app_t app = {args, 2, SPAWNED, env, 1, "/", "capi-kids"};
        cohort_spawn_opts_t sopts;
        memset(&sopts, 0, sizeof sopts);
        sopts.mapping = COHORT_MAP_ROUND_ROBIN;
        char child_ns[COHORT_MAX_NSLEN + 1];
        rc = cohort_spawn(c, &app, 0, &sopts, child_ns);
        CHECK(rc == COHORT_ERR_BAD_PARAM, "a spawn of nothing: %s", cohort_status_name(rc));
        sopts.mapping = 7;
        rc = cohort_spawn(c, &app, 1, &sopts, child_ns);
        CHECK(rc == COHORT_ERR_BAD_PARAM, "mapping 7: %s", cohort_status_name(rc));
        sopts.mapping = COHORT_MAP_PER_NODE; /* per_node 0 */
        rc = cohort_spawn(c, &app, 1, &sopts, child_ns);
        CHECK(rc == COHORT_ERR_BAD_PARAM, "per_node 0: %s", cohort_status_name(rc));
        sopts.per_node = 1; /* ppr:1:node: 4 do not fit on 1 or 3 node servers */
        sopts.bind_to = "sideways";
        rc = cohort_spawn(c, &app, 1, &sopts, child_ns);
        CHECK(rc == COHORT_ERR_BAD_REQUEST, "bound sideways: %s", cohort_status_name(rc));
        sopts.bind_to = NULL;
        app.maxprocs = 4;
        rc = cohort_spawn(c, &app, 1, &sopts, child_ns);
        CHECK(rc == COHORT_ERR_BAD_REQUEST, "4 at one per node server: %s",
              cohort_status_name(rc));
        app.maxprocs = SPAWNED;
        sopts.mapping = COHORT_MAP_ROUND_ROBIN;
        if (n == 4) {
            OK(cohort_spawn(c, &app, 1, &sopts, child_ns));
        } else {
            struct wait w = {0};
            OK(cohort_spawn_nb(c, &app, 1, &sopts, spawned_done, &w));
            wait_for(&w, "non-blocking spawn");
            snprintf(child_ns, sizeof child_ns, "%s", w.text);
        }
        char prefix[COHORT_MAX_NSLEN + 2];
        snprintf(prefix, sizeof prefix, "%s@", ns);
        CHECK(strncmp(child_ns, prefix, strlen(prefix)) == 0, "spawned namespace %s", child_ns);
        OK(cohort_put_string(c, COHORT_SCOPE_GLOBAL, "child-ns", child_ns));
        OK(cohort_commit(c));
    }
    /* Rank 0 committed before: a get of its new key needs the fence. */
    OK(cohort_fence(c, NULL, 0, 1, 60000));
    cohort_proc_t root = proc_of(ns, 0);
    cohort_value_t v;
    OK(cohort_get(c, &root, "child-ns", 60000, &v));
    CHECK(v.type == COHORT_VALUE_STRING, "child-ns has type %d", v.type);
    char child_ns[COHORT_MAX_NSLEN + 1];
    snprintf(child_ns, sizeof child_ns, "%s", v.str);
    cohort_value_free(&v);
    char conn_ns[COHORT_MAX_NSLEN + 1];
    connect_jobs(c, ns, child_ns, conn_ns);
    /* While the children run: their set and namespace are the session's. */
    char **names = NULL;
    size_t nnames = 0;
    OK(cohort_pset_names(c, &names, &nnames));
    CHECK(listed(names, nnames, "evens", "capi-kids"), "%zu sets while the children run",
          nnames);
    cohort_strings_free(names, nnames);
    OK(cohort_namespaces(c, &names, &nnames));
    CHECK(listed(names, nnames, ns, child_ns), "%zu namespaces while the children run", nnames);
    cohort_strings_free(names, nnames);
    for (uint32_t r = 0; r < SPAWNED; r++) {
        cohort_proc_t child = proc_of(child_ns, r);
        char want[32];
        snprintf(want, sizeof want, "child-%u", r);
        OK(cohort_get(c, &child, "child-word", 10000, &v));
        CHECK(v.type == COHORT_VALUE_STRING && strcmp(v.str, want) == 0, "child %u's word", r);
        cohort_value_free(&v);
    }
    OK(cohort_disconnect(c, conn_ns, 60000));
    /* The children end: their set is deleted (bounded wait, only against a hang). */
    for (int i = 0; i < 30000 && !__atomic_load_n(&kids_deleted, __ATOMIC_SEQ_CST); i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    CHECK(kids_deleted, "no COHORT_EVENT_PROCESS_SET_DELETE for capi-kids");
    OK(cohort_deregister_event_handler(c, deleted_handler));
    OK(cohort_pset_names(c, &names, &nnames));
    CHECK(listed(names, nnames, "evens", NULL), "%zu sets after the children", nnames);
    cohort_strings_free(names, nnames);
    OK(cohort_namespaces(c, &names, &nnames));
    CHECK(listed(names, nnames, ns, NULL), "%zu namespaces after the children", nnames);
    cohort_strings_free(names, nnames);
}

int main(int argc, char **argv) {
    cohort_client_t *c = NULL;
    int rc = cohort_init(&c);
    if (rc != COHORT_SUCCESS) {
        fprintf(stderr, "FAIL rank ?: cohort_init: %s: %s\n", cohort_status_name(rc),
                cohort_last_error());
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child_main(c);
    me = cohort_rank(c);
    uint32_t n = cohort_size(c);
    const char *ns = cohort_nspace(c);
    CHECK(n >= 3, "run with at least 3 ranks, not %u", n);

    /* Data: each rank's endpoint, read by the next rank after a collecting fence. */
    char ep[64];
    snprintf(ep, sizeof ep, "ep-%u", me);
    OK(cohort_put_string(c, COHORT_SCOPE_GLOBAL, "endpoint", ep));
    OK(cohort_put_u64(c, COHORT_SCOPE_REMOTE, "answer", 40 + me));
    unsigned char blob[3] = {1, 2, (unsigned char)me};
    OK(cohort_put_bytes(c, COHORT_SCOPE_REMOTE, "blob", blob, sizeof blob));
    OK(cohort_commit(c));
    OK(cohort_fence(c, NULL, 0, 1, 60000));

    /* Publish / lookup: every rank but 0 waits (non-blocking, for every key) for what
     * rank 0 publishes after a fence; publishing the key again is refused, naming it;
     * a lookup of two keys finds the one published; unpublish removes it. */
    const char *pkeys[] = {"c-port", "c-nothing"};
    cohort_lookup_opts_t lo;
    memset(&lo, 0, sizeof lo);
    lo.wait = COHORT_WAIT_ALL;
    lo.timeout_ms = 60000;
    struct wait looked = {0};
    if (me != 0)
        OK(cohort_lookup_nb(c, pkeys, 1, &lo, lookup_done, &looked));
    OK(cohort_fence(c, NULL, 0, 0, 60000));
    if (me == 0) {
        cohort_info_t port = u64_info("c-port", 4711);
        OK(cohort_publish(c, &port, 1, NULL));
        rc = cohort_publish(c, &port, 1, NULL);
        CHECK(rc == COHORT_ERR_KEY_PUBLISHED && strstr(cohort_last_error(), "c-port"),
              "second publish: %s", cohort_status_name(rc));
    } else {
        wait_for(&looked, "non-blocking waiting lookup");
        CHECK(looked.nmembers == 1 && looked.ctx == 4711 && looked.ninfo == 0,
              "waiting lookup: %zu found, %llu from rank %zu", looked.nmembers,
              (unsigned long long)looked.ctx, looked.ninfo);
    }
    OK(cohort_fence(c, NULL, 0, 0, 60000));
    cohort_published_t *found = NULL;
    size_t nfound = 0;
    OK(cohort_lookup(c, pkeys, 2, NULL, &found, &nfound));
    CHECK(nfound == 1 && strcmp(found[0].key, "c-port") == 0 &&
              found[0].value.type == COHORT_VALUE_U64 && found[0].value.u64 == 4711 &&
              found[0].publisher.rank == 0 && strcmp(found[0].publisher.nspace, ns) == 0,
          "lookup of two keys: %zu found", nfound);
    cohort_published_free(found, nfound);
    OK(cohort_fence(c, NULL, 0, 0, 60000));
    if (me == 0) {
        struct wait gone = {0};
        OK(cohort_unpublish_nb(c, NULL, 0, NULL, op_done, &gone));
        wait_for(&gone, "non-blocking unpublish");
    }
    OK(cohort_fence(c, NULL, 0, 0, 60000));
    OK(cohort_lookup(c, pkeys, 1, NULL, &found, &nfound));
    CHECK(nfound == 0 && found == NULL, "unpublished key found %zu times", nfound);

    uint32_t next = (me + 1) % n;
    cohort_proc_t peer = proc_of(ns, next);
    cohort_value_t v;
    OK(cohort_get(c, &peer, "endpoint", 10000, &v));
    char want[64];
    snprintf(want, sizeof want, "ep-%u", next);
    CHECK(v.type == COHORT_VALUE_STRING && strcmp(v.str, want) == 0, "endpoint of %u", next);
    cohort_value_free(&v);
    OK(cohort_get(c, &peer, "answer", 10000, &v));
    CHECK(v.type == COHORT_VALUE_U64 && v.u64 == 40 + next, "answer of %u", next);
    cohort_value_free(&v);
    OK(cohort_get(c, &peer, "blob", 10000, &v));
    CHECK(v.type == COHORT_VALUE_BYTES && v.len == 3 && ((unsigned char *)v.bytes)[2] == next,
          "blob of %u", next);
    cohort_value_free(&v);

    /* A typed error naming what is missing. */
    rc = cohort_get(c, &peer, "no-such-key", 2000, &v);
    CHECK(rc == COHORT_ERR_NOT_FOUND || rc == COHORT_ERR_TIMEOUT, "missing key: %s",
          cohort_status_name(rc));
    CHECK(strstr(cohort_last_error(), "no-such-key") != NULL || rc == COHORT_ERR_TIMEOUT,
          "the error names the key");

    /* Bootstrap method, non-blocking: ranks 0 and 1 lead knowing only that there are
     * two leaders; rank 0 names the others as add-members, who call with no procs. */
    cohort_proc_t self = proc_of(ns, me);
    cohort_proc_t *adds = calloc(n, sizeof *adds);
    for (uint32_t r = 2; r < n; r++)
        adds[r - 2] = proc_of(ns, r);
    cohort_construct_opts_t bopts;
    memset(&bopts, 0, sizeof bopts);
    bopts.timeout_ms = 60000;
    bopts.assign_context_id = 1;
    if (me < 2)
        bopts.bootstrap = 2;
    if (me == 0) {
        bopts.add_members = adds;
        bopts.nadd_members = n - 2;
    }
    struct wait boot = {0};
    OK(cohort_group_construct_nb(c, "c-boot", &self, me < 2 ? 1 : 0, &bopts, group_done, &boot));
    wait_for(&boot, "bootstrap construct");
    free(adds);
    CHECK(boot.nmembers == n && boot.ctx != 0, "bootstrap group: %zu members", boot.nmembers);

    /* A non-blocking fence over the group, then a non-blocking get by group rank. */
    cohort_proc_t boot_all = proc_of("c-boot", COHORT_RANK_WILDCARD);
    struct wait fence = {0};
    OK(cohort_fence_nb(c, &boot_all, 1, 0, 60000, op_done, &fence));
    wait_for(&fence, "group fence");
    cohort_proc_t boot_next = proc_of("c-boot", next);
    struct wait got = {0};
    OK(cohort_get_nb(c, &boot_next, "endpoint", 10000, value_done, &got));
    wait_for(&got, "get by group rank");
    CHECK(strcmp(got.text, want) == 0, "get by group rank: %s", got.text);

    /* An event to the group's members; a handler registered after it arrived still
     * gets it (cached). */
    if (me == 0) {
        cohort_info_t payload = u64_info("payload", 4242);
        OK(cohort_notify(c, APP_EVENT, COHORT_RANGE_GROUP, "c-boot", NULL, 0, &payload, 1));
    }
    cohort_proc_t boot_all_again = boot_all;
    struct wait fence2 = {0};
    OK(cohort_fence_nb(c, &boot_all_again, 1, 0, 60000, op_done, &fence2));
    wait_for(&fence2, "second group fence");
    if (me != 0) {
        int app_code[1] = {APP_EVENT};
        uint64_t app_handler;
        OK(cohort_register_event_callback(c, app_code, 1, on_app_event, NULL, &app_handler));
        for (int i = 0; i < 30000 && __atomic_load_n(&app_events, __ATOMIC_SEQ_CST) == 0; i++) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        CHECK(app_events == 1, "the group event arrived %d times", app_events);
        OK(cohort_deregister_event_handler(c, app_handler));
    }
    cohort_group_t q;
    OK(cohort_group_query(c, "c-boot", &q));
    CHECK(q.nmembers == n && q.has_context_id && q.context_id == boot.ctx, "query");
    cohort_group_free(&q);
    struct wait gone = {0};
    OK(cohort_group_destruct_nb(c, "c-boot", 60000, op_done, &gone));
    wait_for(&gone, "destruct");

    /* Invite/join: rank 0 invites everyone else to "c-inv"; each accepts from its
     * handler, with its group info. Then, non-blocking, to "c-inv2": all decline. */
    client_for_handlers = c;
    if (me == 0) {
        cohort_proc_t *invitees = calloc(n, sizeof *invitees);
        for (uint32_t r = 1; r < n; r++)
            invitees[r - 1] = proc_of(ns, r);
        cohort_info_t lead = u64_info("leader-note", 7);
        cohort_invite_opts_t iopts;
        memset(&iopts, 0, sizeof iopts);
        iopts.timeout_ms = 60000;
        iopts.assign_context_id = 1;
        iopts.group_info = &lead;
        iopts.ngroup_info = 1;
        cohort_group_t inv;
        OK(cohort_group_invite(c, "c-inv", invitees, n - 1, &iopts, &inv));
        CHECK(inv.nmembers == n && inv.has_context_id, "invite: %zu members", inv.nmembers);
        /* Every joiner's "joiner" = its rank, and the leader's note. */
        uint64_t joiners = 0;
        int noted = 0;
        for (size_t i = 0; i < inv.ninfo; i++) {
            const cohort_group_info_t *e = &inv.info[i];
            if (strcmp(e->key, "joiner") == 0 && e->value.type == COHORT_VALUE_U64 &&
                e->value.u64 == e->member.rank && e->member.rank != 0)
                joiners++;
            if (strcmp(e->key, "leader-note") == 0 && e->member.rank == 0 && e->value.u64 == 7)
                noted++;
        }
        CHECK(joiners == n - 1 && noted == 1 && inv.ninfo == n,
              "invite's group info: %llu joiners, %d notes, %zu entries",
              (unsigned long long)joiners, noted, inv.ninfo);
        cohort_group_free(&inv);
        CHECK(inv.info == NULL && inv.ninfo == 0, "a released group is empty");
        struct wait inv2 = {0};
        iopts.group_info = NULL;
        iopts.ngroup_info = 0;
        OK(cohort_group_invite_nb(c, "c-inv2", invitees, n - 1, &iopts, group_done, &inv2));
        wait_for(&inv2, "non-blocking invite");
        CHECK(inv2.nmembers == 1, "everyone declined: %zu members", inv2.nmembers);
        free(invitees);
    } else {
        int inv_code[1] = {COHORT_EVENT_GROUP_INVITED};
        uint64_t inv_handler;
        OK(cohort_register_event_handler(c, inv_code, 1, on_invited, NULL, &inv_handler));
        wait_for(&joined, "join from the handler");
        CHECK(joined.nmembers == n && joined.ninfo == n, "joined: %zu members, %zu info",
              joined.nmembers, joined.ninfo);
        wait_for(&declined, "decline from the handler");
        CHECK(invitations == 2 && declined.nmembers == 0, "declined: %d invitations",
              invitations);
        OK(cohort_deregister_event_handler(c, inv_handler));
    }
    OK(cohort_group_destruct(c, "c-inv", 60000));
    if (me == 0)
        OK(cohort_group_destruct(c, "c-inv2", 60000));

    /* Process sets: the test runs the job with --pset evens=<the even ranks>. */
    char **names = NULL;
    size_t nnames = 0;
    OK(cohort_pset_names(c, &names, &nnames));
    CHECK(nnames == 1 && strcmp(names[0], "evens") == 0, "%zu process sets", nnames);
    cohort_strings_free(names, nnames);
    cohort_proc_t *evens = NULL;
    size_t nevens = 0;
    OK(cohort_pset_members(c, "evens", &evens, &nevens));
    CHECK(nevens == (n + 1) / 2, "%zu even ranks", nevens);
    for (size_t i = 0; i < nevens; i++)
        CHECK(evens[i].rank == 2 * i && strcmp(evens[i].nspace, ns) == 0, "even member %zu", i);
    cohort_procs_free(evens, nevens);
    rc = cohort_pset_members(c, "odds", &evens, &nevens);
    CHECK(rc == COHORT_ERR_PSET_NOT_FOUND && strstr(cohort_last_error(), "odds"),
          "an unknown set: %s", cohort_status_name(rc));
    uint32_t app = 7;
    OK(cohort_appnum(c, &self, &app));
    CHECK(app == 0, "appnum %u", app);
    OK(cohort_get(c, &self, "pmix.pset.nms", 10000, &v));
    CHECK(v.type == COHORT_VALUE_STRINGS &&
              (me % 2 == 0 ? v.len == 1 && strcmp(v.strs[0], "evens") == 0 : v.len == 0),
          "my sets: type %d, %zu", v.type, v.len);
    cohort_value_free(&v);

    /* PMIx_Connect over the whole job: one new nspace everywhere, ranks as in the job;
     * usable as a process set address; disconnect is collective. */
    cohort_proc_t everyone = proc_of(ns, COHORT_RANK_WILDCARD);
    cohort_connect_opts_t copts;
    memset(&copts, 0, sizeof copts);
    copts.connect_id = "c-demo";
    copts.timeout_ms = 60000;
    char conn_ns[COHORT_MAX_NSLEN + 1];
    uint32_t conn_rank = UINT32_MAX;
    OK(cohort_connect(c, &everyone, 1, &copts, conn_ns, &conn_rank));
    /* The same, non-blocking, with another connect id: another nspace. */
    struct wait conn2 = {0};
    copts.connect_id = "c-demo-2";
    OK(cohort_connect_nb(c, &everyone, 1, &copts, connected, &conn2));
    wait_for(&conn2, "non-blocking connect");
    CHECK(conn2.ctx == me && strlen(conn2.text) > 0 && strcmp(conn2.text, conn_ns) != 0,
          "second connection: rank %llu in %s", (unsigned long long)conn2.ctx, conn2.text);
    struct wait disc2 = {0};
    OK(cohort_disconnect_nb(c, conn2.text, 60000, op_done, &disc2));
    wait_for(&disc2, "non-blocking disconnect");
    CHECK(conn_rank == me && strlen(conn_ns) > 0 && strcmp(conn_ns, ns) != 0,
          "connect: rank %u in %s", conn_rank, conn_ns);
    cohort_proc_t conn_all = proc_of(conn_ns, COHORT_RANK_WILDCARD);
    OK(cohort_fence(c, &conn_all, 1, 0, 60000));
    OK(cohort_disconnect(c, conn_ns, 60000));
    rc = cohort_disconnect(c, conn_ns, 1000);
    CHECK(rc == COHORT_ERR_GROUP_NOT_FOUND, "a second disconnect: %s", cohort_status_name(rc));

    spawn_children(c, argv[0]);

    /* Every rank joins "c-all", with a context id. */
    int leaves = me == n - 1;
    uint64_t handler = 0;
    int codes[1] = {COHORT_EVENT_GROUP_LEFT};
    if (!leaves)
        OK(cohort_register_event_handler(c, codes, 1, on_left, NULL, &handler));
    cohort_proc_t *all = calloc(n, sizeof *all);
    for (uint32_t r = 0; r < n; r++)
        all[n - 1 - r] = proc_of(ns, r); /* any order: the membership is canonical */
    cohort_construct_opts_t opts;
    memset(&opts, 0, sizeof opts);
    opts.assign_context_id = 1;
    opts.timeout_ms = 60000;
    cohort_info_t colour = u64_info("colour", 100 + me);
    opts.group_info = &colour;
    opts.ngroup_info = 1;
    cohort_group_t g;
    OK(cohort_group_construct(c, "c-all", all, n, &opts, &g));
    CHECK(g.nmembers == n && g.has_context_id && !g.partial && g.nfailed == 0,
          "group: %zu members, ctx %d", g.nmembers, g.has_context_id);
    for (uint32_t r = 0; r < n; r++)
        CHECK(g.members[r].rank == r && strcmp(g.members[r].nspace, ns) == 0, "member %u", r);
    /* Every member's colour, each once, without a fence. */
    CHECK(g.ninfo == n, "group info: %zu entries", g.ninfo);
    uint64_t colours = 0;
    for (size_t i = 0; i < g.ninfo; i++) {
        const cohort_group_info_t *e = &g.info[i];
        CHECK(strcmp(e->key, "colour") == 0 && e->value.type == COHORT_VALUE_U64 &&
                  e->value.u64 == 100 + e->member.rank && strcmp(e->member.nspace, ns) == 0,
              "group info entry %zu: %s of rank %u", i, e->key, e->member.rank);
        colours |= 1ull << (e->member.rank % 64);
    }
    CHECK(colours == (n >= 64 ? ~0ull : (1ull << n) - 1), "each member's colour once");
    uint64_t ctx = g.context_id;
    cohort_group_free(&g);

    /* Local-only groups: each node server's ranks form one that stays there. */
    uint32_t my_node = 0, nlocal = 0;
    cohort_proc_t *local = calloc(n, sizeof *local);
    for (uint32_t r = 0; r < n; r++) {
        cohort_proc_t p = proc_of(ns, r);
        OK(cohort_get(c, &p, "pmix.nodeid", 10000, &v));
        CHECK(v.type == COHORT_VALUE_U32, "pmix.nodeid has type %d", v.type);
        if (r == me)
            my_node = v.u32;
        cohort_value_free(&v);
    }
    for (uint32_t r = 0; r < n; r++) {
        cohort_proc_t p = proc_of(ns, r);
        OK(cohort_get(c, &p, "pmix.nodeid", 10000, &v));
        if (v.u32 == my_node)
            local[nlocal++] = p;
        cohort_value_free(&v);
    }
    char local_id[32];
    snprintf(local_id, sizeof local_id, "c-local-%u", my_node);
    cohort_construct_opts_t lopts;
    memset(&lopts, 0, sizeof lopts);
    lopts.local_only = 1;
    lopts.assign_context_id = 1;
    lopts.timeout_ms = 60000;
    OK(cohort_group_construct(c, local_id, local, nlocal, &lopts, &g));
    CHECK(g.nmembers == nlocal && g.has_context_id, "local group: %zu members", g.nmembers);
    cohort_group_free(&g);
    OK(cohort_group_destruct(c, local_id, 60000));
    if (nlocal < n && me == 0) {
        /* A process of another node server: refused, naming it. */
        rc = cohort_group_construct(c, "c-local-bad", all, n, &lopts, &g);
        CHECK(rc == COHORT_ERR_BAD_REQUEST && strstr(cohort_last_error(), "local"),
              "a local-only group over several node servers: %s", cohort_status_name(rc));
    }
    free(local);

    /* "c-ft" of every rank: destructed with FT_COLLECTIVE after the last rank ended. */
    memset(&opts, 0, sizeof opts);
    opts.timeout_ms = 60000;
    OK(cohort_group_construct(c, "c-ft", all, n, &opts, &g));
    cohort_group_free(&g);
    free(all);

    /* A get addressed by group rank, no fence after the construct. */
    cohort_proc_t by_group = proc_of("c-all", next);
    OK(cohort_get(c, &by_group, "endpoint", 10000, &v));
    CHECK(v.type == COHORT_VALUE_STRING && strcmp(v.str, want) == 0, "group rank %u", next);
    cohort_value_free(&v);

    /* Everyone has read by group rank before the last rank leaves (after its leave,
     * group rank n-1 no longer exists). */
    cohort_proc_t c_all = proc_of("c-all", COHORT_RANK_WILDCARD);
    OK(cohort_fence(c, &c_all, 1, 0, 60000));
    if (leaves) {
        struct wait left = {0};
        OK(cohort_group_leave_nb(c, "c-all", op_done, &left));
        wait_for(&left, "non-blocking leave");
        OK(cohort_finalize(c));
        return 0;
    }
    /* The others hear of it (bounded wait, only against a hang). */
    for (int i = 0; i < 30000 && __atomic_load_n(&left_events, __ATOMIC_SEQ_CST) == 0; i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    CHECK(left_events == 1 && left_rank == n - 1 && strcmp(left_group, "c-all") == 0,
          "GROUP_LEFT: %d events, rank %u, group %s", left_events, left_rank, left_group);

    /* The last rank finalized and exits: a fault-tolerant fence over the job completes
     * without it once it ended, a strict one fails naming it, and a fault-tolerant
     * destruct of "c-ft" completes without it. */
    OK(cohort_fence_ft(c, NULL, 0, 0, 60000));
    rc = cohort_fence(c, NULL, 0, 0, 60000);
    CHECK(rc == COHORT_ERR_PROC_TERMINATED, "a strict fence without the last rank: %s",
          cohort_status_name(rc));
    OK(cohort_group_destruct_ft(c, "c-ft", 60000));
    OK(cohort_deregister_event_handler(c, handler));
    CHECK(cohort_deregister_event_handler(c, handler) == COHORT_ERR_BAD_PARAM,
          "a second deregistration is refused");

    /* Nobody failed: both views are empty, and agreed by every remaining member. */
    cohort_failed_t f;
    OK(cohort_group_failed_local(c, "c-all", &f));
    CHECK(f.nfailed == 0 && f.nfresh == 0, "local view: %zu failed", f.nfailed);
    cohort_failed_free(&f);
    OK(cohort_group_failed_global(c, "c-all", 60000, &f));
    CHECK(f.nfailed == 0, "global view: %zu failed", f.nfailed);
    size_t nfailed = f.nfailed;
    cohort_failed_free(&f);
    struct wait view = {0};
    view.nmembers = 99;
    OK(cohort_group_failed_global_nb(c, "c-all", 60000, failed_done, &view));
    wait_for(&view, "non-blocking global view");
    CHECK(view.nmembers == 0, "non-blocking global view: %zu failed", view.nmembers);

    /* Typed errors name the group. */
    rc = cohort_group_destruct(c, "no-such-group", 1000);
    CHECK(rc == COHORT_ERR_GROUP_NOT_FOUND && strstr(cohort_last_error(), "no-such-group"),
          "destruct of an unknown group: %s", cohort_status_name(rc));
    rc = cohort_group_leave(c, "no-such-group");
    CHECK((rc == COHORT_ERR_GROUP_NOT_FOUND || rc == COHORT_ERR_NOT_A_MEMBER) &&
              strstr(cohort_last_error(), "no-such-group"),
          "leave of an unknown group: %s", cohort_status_name(rc));
    rc = cohort_group_construct(c, "", NULL, 0, NULL, &g);
    CHECK(rc == COHORT_ERR_INVALID_GROUP_ID, "empty id: %s", cohort_status_name(rc));
    CHECK(cohort_put_string(c, 7, "k", "v") == COHORT_ERR_BAD_PARAM, "scope 7");
    CHECK(cohort_fence(NULL, NULL, 0, 0, 0) == COHORT_ERR_BAD_PARAM, "NULL client");

    OK(cohort_group_destruct(c, "c-all", 60000));
    printf("RESULT members=%u ctx=%llu failed=%zu conn=%s spawned=%d\n", n,
           (unsigned long long)ctx, nfailed, conn_ns, SPAWNED);
    fflush(stdout);
    OK(cohort_finalize(c));
    return 0;
}
