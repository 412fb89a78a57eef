/* A PMIx client written against OpenPMIx's <pmix.h> only, run under `cohort run`
 * with cohort's libpmix.so.2 (cluster-tests/tests/pmix.rs). Every rank checks each
 * answer itself and prints "FAIL rank R: ..." to stderr on a violation (exit 1);
 * on success it prints one "RESULT ..." line, the same on every rank. */
#include <hwloc.h>
#include <pmix.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pmix_check.h"

#define DEMO_EVENT (PMIX_EXTERNAL_ERR_BASE - 77)
#define DEMO_EVENT2 (PMIX_EXTERNAL_ERR_BASE - 78)

static pmix_proc_t me;

static atomic_int event_seen = 0;
static atomic_uint event_source = 0;
static atomic_int reg_done = 0;
static atomic_size_t reg_ref = 0;
static atomic_int fence_done = 0;
static atomic_int get_done = 0;
static atomic_int get_status = 1;
static char get_text[64];

static void on_event(size_t id, pmix_status_t status, const pmix_proc_t *source,
                     pmix_info_t info[], size_t ninfo, pmix_info_t *results,
                     size_t nresults, pmix_event_notification_cbfunc_fn_t cbfunc,
                     void *cbdata)
{
    (void)id; (void)results; (void)nresults;
    int msg_ok = 0;
    for (size_t i = 0; i < ninfo; i++) {
        if (0 == strcmp(info[i].key, "demo.msg") && PMIX_STRING == info[i].value.type &&
            0 == strcmp(info[i].value.data.string, "hello")) {
            msg_ok = 1;
        }
    }
    if (status == DEMO_EVENT && msg_ok) {
        atomic_store(&event_source, source->rank);
        atomic_store(&event_seen, 1);
    }
    if (NULL != cbfunc) {
        cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
    }
}

/* A default handler (every code), registered before the DEMO_EVENT one: PMIx calls
 * it after that one, which completes DEMO_EVENT (PMIX_EVENT_ACTION_COMPLETE), so it
 * sees DEMO_EVENT2 only. */
static atomic_int default_saw_demo = 0;
static atomic_int default_saw_demo2 = 0;

static void on_any(size_t id, pmix_status_t status, const pmix_proc_t *source,
                   pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                   pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)source; (void)info; (void)ninfo; (void)results; (void)nresults;
    if (status == DEMO_EVENT) {
        atomic_fetch_add(&default_saw_demo, 1);
    }
    if (status == DEMO_EVENT2) {
        atomic_store(&default_saw_demo2, 1);
    }
    if (NULL != cbfunc) {
        cbfunc(PMIX_SUCCESS, NULL, 0, NULL, NULL, cbdata);
    }
}

static void on_registered(pmix_status_t status, size_t ref, void *cbdata)
{
    (void)cbdata;
    atomic_store(&reg_ref, ref);
    atomic_store(&reg_done, status == PMIX_SUCCESS ? 1 : -1);
}

static void on_fence(pmix_status_t status, void *cbdata)
{
    (void)cbdata;
    atomic_store(&fence_done, status == PMIX_SUCCESS ? 1 : -1);
}

static void on_get(pmix_status_t status, pmix_value_t *kv, void *cbdata)
{
    (void)cbdata;
    if (status == PMIX_SUCCESS && kv != NULL && kv->type == PMIX_STRING) {
        snprintf(get_text, sizeof get_text, "%s", kv->data.string);
    }
    atomic_store(&get_status, status);
    atomic_store(&get_done, 1);
}

static atomic_int grp_done = 0;
static atomic_size_t grp_members = 0;

static void on_group(pmix_status_t status, pmix_info_t *info, size_t ninfo, void *cbdata,
                     pmix_release_cbfunc_t release_fn, void *release_cbdata)
{
    (void)cbdata;
    for (size_t i = 0; i < ninfo; i++) {
        if (0 == strcmp(info[i].key, PMIX_GROUP_MEMBERSHIP) &&
            PMIX_DATA_ARRAY == info[i].value.type) {
            atomic_store(&grp_members, info[i].value.data.darray->size);
        }
    }
    if (NULL != release_fn) {
        release_fn(release_cbdata);
    }
    atomic_store(&grp_done, status == PMIX_SUCCESS ? 1 : -1);
}

static atomic_int join_done = 0;
static atomic_size_t join_members = 0;

static void on_join(pmix_status_t status, pmix_info_t *info, size_t ninfo, void *cbdata,
                    pmix_release_cbfunc_t release_fn, void *release_cbdata)
{
    (void)cbdata;
    for (size_t i = 0; i < ninfo; i++) {
        if (0 == strcmp(info[i].key, PMIX_GROUP_MEMBERSHIP) &&
            PMIX_DATA_ARRAY == info[i].value.type) {
            atomic_store(&join_members, info[i].value.data.darray->size);
        }
    }
    if (NULL != release_fn) {
        release_fn(release_cbdata);
    }
    atomic_store(&join_done, status == PMIX_SUCCESS ? 1 : -1);
}

/* An invitation: accepted from the handler with the non-blocking join. */
static void on_invited(size_t id, pmix_status_t status, const pmix_proc_t *source,
                       pmix_info_t info[], size_t ninfo, pmix_info_t *results,
                       size_t nresults, pmix_event_notification_cbfunc_fn_t cbfunc,
                       void *cbdata)
{
    (void)id; (void)results; (void)nresults;
    const char *grp = NULL;
    const pmix_proc_t *leader = source;
    for (size_t i = 0; i < ninfo; i++) {
        if (0 == strcmp(info[i].key, PMIX_GROUP_ID) && PMIX_STRING == info[i].value.type) {
            grp = info[i].value.data.string;
        } else if (0 == strcmp(info[i].key, PMIX_GROUP_LEADER) &&
                   PMIX_PROC == info[i].value.type) {
            leader = info[i].value.data.proc;
        }
    }
    if (status == PMIX_GROUP_INVITED && grp != NULL &&
        PMIX_SUCCESS != PMIx_Group_join_nb(grp, leader, PMIX_GROUP_ACCEPT, NULL, 0, on_join, NULL)) {
        atomic_store(&join_done, -1);
    }
    if (NULL != cbfunc) {
        cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
    }
}

/* Waits (up to 30 s) for *flag to become non-zero. */
static int wait_for(atomic_int *flag)
{
    for (int i = 0; i < 30000 && 0 == atomic_load(flag); i++) {
        usleep(1000);
    }
    return atomic_load(flag);
}

static pmix_value_t *get(const pmix_proc_t *p, const char *key, pmix_data_type_t type)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(p, key, NULL, 0, &v);
    CHECK(rc == PMIX_SUCCESS, "PMIx_Get(%s, %u, %s) -> %s", p->nspace, p->rank, key,
          PMIx_Error_string(rc));
    CHECK(v != NULL && v->type == type, "PMIx_Get(%s): type %s, expected %s", key,
          v ? PMIx_Data_type_string(v->type) : "none", PMIx_Data_type_string(type));
    return v;
}

int main(void)
{
    pmix_status_t rc;
    OK(PMIx_Init(&me, NULL, 0));
    CHECK(PMIx_Initialized(), "PMIx_Initialized is false after PMIx_Init");
    const char *version = PMIx_Get_version();
    CHECK(0 == strncmp(version, "cohort", 6), "PMIx_Get_version is %s: not cohort's library",
          version);

    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *v = get(&wild, PMIX_JOB_SIZE, PMIX_UINT32);
    uint32_t size = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    CHECK(size >= 2 && me.rank < size, "job size %u, rank %u", size, me.rank);
    v = get(&wild, PMIX_UNIV_SIZE, PMIX_UINT32);
    CHECK(v->data.uint32 >= size, "universe size %u below the job size %u", v->data.uint32, size);
    PMIX_VALUE_RELEASE(v);
    v = get(&me, PMIX_LOCAL_RANK, PMIX_UINT16);
    uint16_t lrank = v->data.uint16;
    PMIX_VALUE_RELEASE(v);
    v = get(&me, PMIX_NODE_RANK, PMIX_UINT16);
    CHECK(v->data.uint16 == lrank, "node rank %u, local rank %u", v->data.uint16, lrank);
    PMIX_VALUE_RELEASE(v);
    v = get(&me, PMIX_LOCAL_SIZE, PMIX_UINT32);
    uint32_t lsize = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    CHECK(lrank < lsize, "local rank %u of %u", lrank, lsize);
    v = get(&me, PMIX_LOCAL_PEERS, PMIX_STRING);
    {
        /* The comma-separated list has lsize ranks, this one among them. */
        char *list = strdup(v->data.string), *save = NULL;
        uint32_t n = 0;
        int found = 0;
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            n++;
            found |= (uint32_t)atoi(t) == me.rank;
        }
        CHECK(n == lsize && found, "local peers \"%s\"", v->data.string);
        free(list);
    }
    PMIX_VALUE_RELEASE(v);
    v = get(&me, PMIX_APPNUM, PMIX_UINT32);
    CHECK(v->data.uint32 == 0, "appnum %u", v->data.uint32);
    PMIX_VALUE_RELEASE(v);
    {
        /* This host's topology, as Open MPI 4.1 asks for it ("pmix.hwlocxml2" of the
         * job's wildcard, PMIX_IMMEDIATE): hwloc XML that loads, with as many
         * packages, cores and PUs as hwloc finds here itself. */
        pmix_info_t imm;
        bool yes = true;
        PMIX_INFO_LOAD(&imm, PMIX_IMMEDIATE, &yes, PMIX_BOOL);
        OK(PMIx_Get(&wild, "pmix.hwlocxml2", &imm, 1, &v));
        PMIX_INFO_DESTRUCT(&imm);
        CHECK(v->type == PMIX_STRING, "pmix.hwlocxml2 has type %d", v->type);
        hwloc_topology_t served, here;
        CHECK(hwloc_topology_init(&served) == 0 &&
                  hwloc_topology_set_xmlbuffer(served, v->data.string,
                                               (int)strlen(v->data.string) + 1) == 0 &&
                  hwloc_topology_load(served) == 0,
              "the served topology does not load: %.60s...", v->data.string);
        CHECK(hwloc_topology_init(&here) == 0 && hwloc_topology_load(here) == 0, "hwloc");
        hwloc_obj_type_t types[] = {HWLOC_OBJ_PACKAGE, HWLOC_OBJ_CORE, HWLOC_OBJ_PU};
        for (int t = 0; t < 3; t++) {
            int a = hwloc_get_nbobjs_by_type(served, types[t]);
            int b = hwloc_get_nbobjs_by_type(here, types[t]);
            CHECK(a == b && b > 0, "%d %s served, %d here", a, hwloc_obj_type_string(types[t]), b);
        }
        hwloc_topology_destroy(served);
        hwloc_topology_destroy(here);
        PMIX_VALUE_RELEASE(v);
    }
    v = get(&wild, PMIX_JOB_NUM_APPS, PMIX_UINT32);
    CHECK(v->data.uint32 == 1, "apps %u", v->data.uint32);
    PMIX_VALUE_RELEASE(v);
    v = get(&wild, PMIX_NUM_NODES, PMIX_UINT32);
    uint32_t nodes = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    v = get(&me, PMIX_NODEID, PMIX_UINT32);
    CHECK(v->data.uint32 < nodes, "node id %u of %u", v->data.uint32, nodes);
    PMIX_VALUE_RELEASE(v);
    pmix_proc_t peer;
    PMIX_LOAD_PROCID(&peer, me.nspace, (me.rank + 1) % size);
    v = get(&peer, PMIX_HOSTNAME, PMIX_STRING);
    CHECK(strlen(v->data.string) > 0, "empty host name of rank %u", peer.rank);
    PMIX_VALUE_RELEASE(v);
    v = NULL;
    rc = PMIx_Get(&wild, "pmix.no.such.key", NULL, 0, &v);
    CHECK(rc == PMIX_ERR_NOT_FOUND, "a missing job key: %s", PMIx_Error_string(rc));
    CHECK(PMIx_Get(NULL, NULL, NULL, 0, &v) == PMIX_ERR_BAD_PARAM, "a NULL key is accepted");

    /* Bad arguments are refused, not crashed on. */
    CHECK(PMIx_Put(PMIX_GLOBAL, NULL, NULL) == PMIX_ERR_BAD_PARAM, "a NULL put is accepted");
    CHECK(PMIx_Fence(NULL, 2, NULL, 0) == PMIX_ERR_BAD_PARAM, "a NULL process list is accepted");
    CHECK(PMIx_Group_construct(NULL, &wild, 1, NULL, 0, NULL, NULL) == PMIX_ERR_BAD_PARAM,
          "a NULL group id is accepted");
    CHECK(PMIx_Value_load(NULL, "x", PMIX_STRING) == PMIX_ERR_BAD_PARAM, "a NULL value is loaded");

    /* Peers and nodes. */
    pmix_proc_t *peers = NULL;
    size_t npeers = 0;
    OK(PMIx_Resolve_peers(NULL, me.nspace, &peers, &npeers));
    CHECK(npeers == lsize, "%zu peers on this node, local size %u", npeers, lsize);
    int self_listed = 0;
    for (size_t i = 0; i < npeers; i++) self_listed |= peers[i].rank == me.rank;
    CHECK(self_listed, "this rank is not among its node's peers");
    PMIX_PROC_FREE(peers, npeers);
    char *nodelist = NULL;
    OK(PMIx_Resolve_nodes(me.nspace, &nodelist));
    {
        uint32_t n = 1;
        for (char *c = nodelist; *c; c++) n += *c == ',';
        CHECK(n == nodes, "node list \"%s\" for %u nodes", nodelist, nodes);
    }
    free(nodelist);

    /* Events: registered (callback form) before anyone notifies; a default handler
     * first (blocking form: its reference is the return value). */
    CHECK(PMIx_Register_event_handler(NULL, 0, NULL, 0, on_any, NULL, NULL) >= 0,
          "registering a default handler");
    pmix_status_t code = DEMO_EVENT;
    OK(PMIx_Register_event_handler(&code, 1, NULL, 0, on_event, on_registered, NULL));
    CHECK(wait_for(&reg_done) == 1, "the registration callback did not report success");

    /* Put, commit, fence with data collection, get another rank's data. */
    char ep[64];
    snprintf(ep, sizeof ep, "ep-%u", me.rank);
    pmix_value_t val;
    PMIX_VALUE_LOAD(&val, ep, PMIX_STRING);
    OK(PMIx_Put(PMIX_GLOBAL, "demo.ep", &val));
    PMIX_VALUE_DESTRUCT(&val);
    pmix_byte_object_t bo;
    char blob[300];
    for (size_t i = 0; i < sizeof blob; i++) blob[i] = (char)(i * 7 + me.rank);
    bo.bytes = blob;
    bo.size = sizeof blob;
    PMIX_VALUE_LOAD(&val, &bo, PMIX_BYTE_OBJECT);
    OK(PMIx_Put(PMIX_REMOTE, "demo.blob", &val));
    PMIX_VALUE_DESTRUCT(&val);
    uint16_t u16 = (uint16_t)(1000 + me.rank);
    PMIX_VALUE_LOAD(&val, &u16, PMIX_UINT16);
    OK(PMIx_Put(PMIX_GLOBAL, "demo.u16", &val));
    PMIX_VALUE_DESTRUCT(&val);
    OK(PMIx_Commit());
    pmix_info_t *info;
    PMIX_INFO_CREATE(info, 1);
    bool collect = true;
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    OK(PMIx_Fence(&wild, 1, info, 1));
    PMIX_INFO_FREE(info, 1);

    v = get(&peer, "demo.ep", PMIX_STRING);
    char expect[64];
    snprintf(expect, sizeof expect, "ep-%u", peer.rank);
    CHECK(0 == strcmp(v->data.string, expect), "rank %u's demo.ep is %s", peer.rank,
          v->data.string);
    PMIX_VALUE_RELEASE(v);
    v = get(&peer, "demo.u16", PMIX_UINT16);
    CHECK(v->data.uint16 == 1000 + peer.rank, "rank %u's demo.u16 is %u", peer.rank,
          v->data.uint16);
    PMIX_VALUE_RELEASE(v);
    /* A remote-scope blob is only visible from other nodes: ask a rank off this node
     * if there is one. */
    for (uint32_t r = 0; r < size; r++) {
        pmix_proc_t p;
        PMIX_LOAD_PROCID(&p, me.nspace, r);
        pmix_value_t *nid = get(&p, PMIX_NODEID, PMIX_UINT32), *mine = get(&me, PMIX_NODEID, PMIX_UINT32);
        int remote = nid->data.uint32 != mine->data.uint32;
        PMIX_VALUE_RELEASE(nid);
        PMIX_VALUE_RELEASE(mine);
        if (!remote) continue;
        v = get(&p, "demo.blob", PMIX_BYTE_OBJECT);
        CHECK(v->data.bo.size == sizeof blob, "rank %u's blob has %zu bytes", r, v->data.bo.size);
        for (size_t i = 0; i < sizeof blob; i++) {
            CHECK(v->data.bo.bytes[i] == (char)(i * 7 + r), "rank %u's blob differs at %zu", r, i);
        }
        PMIX_VALUE_RELEASE(v);
        break;
    }

    /* Non-blocking get and fence. */
    PMIX_LOAD_PROCID(&peer, me.nspace, (me.rank + size - 1) % size);
    OK(PMIx_Get_nb(&peer, "demo.ep", NULL, 0, on_get, NULL));
    CHECK(wait_for(&get_done) && atomic_load(&get_status) == PMIX_SUCCESS,
          "PMIx_Get_nb -> %d", atomic_load(&get_status));
    snprintf(expect, sizeof expect, "ep-%u", peer.rank);
    CHECK(0 == strcmp(get_text, expect), "PMIx_Get_nb gave %s", get_text);
    OK(PMIx_Fence_nb(NULL, 0, NULL, 0, on_fence, NULL));
    CHECK(wait_for(&fence_done) == 1, "PMIx_Fence_nb failed");

    /* Rank 0 raises an event to the job; every other rank's handler sees it. */
    if (me.rank == 0) {
        PMIX_INFO_CREATE(info, 1);
        PMIX_INFO_LOAD(&info[0], "demo.msg", "hello", PMIX_STRING);
        OK(PMIx_Notify_event(DEMO_EVENT, &me, PMIX_RANGE_NAMESPACE, info, 1, NULL, NULL));
        OK(PMIx_Notify_event(DEMO_EVENT2, &me, PMIX_RANGE_NAMESPACE, info, 1, NULL, NULL));
        PMIX_INFO_FREE(info, 1);
    } else {
        CHECK(wait_for(&event_seen), "no event from rank 0");
        CHECK(atomic_load(&event_source) == 0, "the event came from rank %u",
              atomic_load(&event_source));
        /* Events arrive in order: once the second is seen, the first was handled. */
        CHECK(wait_for(&default_saw_demo2), "the default handler never saw DEMO_EVENT2");
        CHECK(atomic_load(&default_saw_demo) == 0,
              "the default handler saw DEMO_EVENT after its handler completed it");
    }

    /* A group of the whole job with a context id, its directives built as a PMIx v4
     * info list. */
    void *list = PMIx_Info_list_start();
    CHECK(list != NULL, "PMIx_Info_list_start");
    bool yes = true;
    OK(PMIx_Info_list_add(list, PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL));
    int secs = 30;
    OK(PMIx_Info_list_add(list, PMIX_TIMEOUT, &secs, PMIX_INT));
    pmix_data_array_t directives;
    OK(PMIx_Info_list_convert(list, &directives));
    PMIx_Info_list_release(list);
    CHECK(directives.type == PMIX_INFO && directives.size == 2, "an info list of %zu",
          directives.size);
    pmix_info_t *results = NULL;
    size_t nresults = 0;
    OK(PMIx_Group_construct("demo-grp", &wild, 1, (pmix_info_t *)directives.array,
                            directives.size, &results, &nresults));
    PMIx_Data_array_destruct(&directives);
    size_t ctx = 0, members = 0;
    int have_ctx = 0;
    for (size_t i = 0; i < nresults; i++) {
        if (0 == strcmp(results[i].key, PMIX_GROUP_CONTEXT_ID)) {
            CHECK(results[i].value.type == PMIX_SIZE, "context id type %s",
                  PMIx_Data_type_string(results[i].value.type));
            ctx = results[i].value.data.size;
            have_ctx = 1;
        } else if (0 == strcmp(results[i].key, PMIX_GROUP_MEMBERSHIP)) {
            CHECK(results[i].value.type == PMIX_DATA_ARRAY, "membership type");
            pmix_data_array_t *d = results[i].value.data.darray;
            CHECK(d->type == PMIX_PROC, "membership element type");
            pmix_proc_t *ps = (pmix_proc_t *)d->array;
            for (size_t m = 0; m < d->size; m++) {
                CHECK(PMIX_CHECK_NSPACE(ps[m].nspace, me.nspace) && ps[m].rank == m,
                      "member %zu is %s.%u", m, ps[m].nspace, ps[m].rank);
            }
            members = d->size;
        }
    }
    PMIX_INFO_FREE(results, nresults);
    CHECK(have_ctx && members == size, "context id %d, %zu members", have_ctx, members);

    /* The group is known to queries. */
    pmix_query_t *q;
    PMIX_QUERY_CREATE(q, 1);
    PMIX_ARGV_APPEND(rc, q[0].keys, PMIX_QUERY_GROUP_NAMES);
    results = NULL;
    nresults = 0;
    OK(PMIx_Query_info(q, 1, &results, &nresults));
    int listed = 0;
    for (size_t i = 0; i < nresults; i++) {
        if (results[i].value.type == PMIX_DATA_ARRAY) {
            pmix_data_array_t *d = results[i].value.data.darray;
            char **names = (char **)d->array;
            for (size_t n = 0; n < d->size; n++) listed |= 0 == strcmp(names[n], "demo-grp");
        }
    }
    CHECK(listed, "PMIX_QUERY_GROUP_NAMES does not list demo-grp");
    PMIX_INFO_FREE(results, nresults);
    PMIX_QUERY_FREE(q, 1);

    OK(PMIx_Group_destruct("demo-grp", NULL, 0));

    /* Each node's ranks form a group of their own with PMIX_GROUP_LOCAL_ONLY (it meets
     * on their node server alone), with a context id, and destruct it. */
    {
        v = get(&me, PMIX_LOCAL_PEERS, PMIX_STRING);
        char *list = strdup(v->data.string), *save = NULL;
        PMIX_VALUE_RELEASE(v);
        pmix_proc_t peers[64];
        size_t npeers = 0;
        for (char *t = strtok_r(list, ",", &save); t && npeers < 64; t = strtok_r(NULL, ",", &save)) {
            /* (The macro evaluates its first argument more than once.) */
            PMIX_PROC_LOAD(&peers[npeers], me.nspace, (pmix_rank_t)strtoul(t, NULL, 10));
            npeers++;
        }
        free(list);
        v = get(&me, PMIX_NODEID, PMIX_UINT32);
        char local_id[64];
        snprintf(local_id, sizeof local_id, "demo-node-%u", v->data.uint32);
        PMIX_VALUE_RELEASE(v);
        pmix_info_t li[2];
        bool on = true;
        PMIX_INFO_LOAD(&li[0], PMIX_GROUP_LOCAL_ONLY, &on, PMIX_BOOL);
        PMIX_INFO_LOAD(&li[1], PMIX_GROUP_ASSIGN_CONTEXT_ID, &on, PMIX_BOOL);
        results = NULL;
        nresults = 0;
        OK(PMIx_Group_construct(local_id, peers, npeers, li, 2, &results, &nresults));
        size_t local_members = 0;
        for (size_t i = 0; i < nresults; i++) {
            if (0 == strcmp(results[i].key, PMIX_GROUP_MEMBERSHIP)) {
                local_members = results[i].value.data.darray->size;
            }
        }
        PMIX_INFO_FREE(results, nresults);
        CHECK(local_members == npeers, "local-only group %s has %zu members, not %zu", local_id,
              local_members, npeers);
        OK(PMIx_Group_destruct(local_id, NULL, 0));
    }

    /* The process set "evens" (cohort run --pset evens=0,2,...): queried by name and
     * membership, and read as this rank's PMIX_PSET_NAMES. */
    PMIX_QUERY_CREATE(q, 2);
    PMIX_ARGV_APPEND(rc, q[0].keys, PMIX_QUERY_PSET_NAMES);
    PMIX_ARGV_APPEND(rc, q[1].keys, PMIX_QUERY_PSET_MEMBERSHIP);
    PMIX_INFO_CREATE(q[1].qualifiers, 1);
    q[1].nqual = 1;
    PMIX_INFO_LOAD(&q[1].qualifiers[0], PMIX_PSET_NAME, "evens", PMIX_STRING);
    results = NULL;
    nresults = 0;
    OK(PMIx_Query_info(q, 2, &results, &nresults));
    int named = 0;
    size_t evens = 0;
    for (size_t i = 0; i < nresults; i++) {
        if (0 == strcmp(results[i].key, PMIX_QUERY_PSET_NAMES)) {
            CHECK(results[i].value.type == PMIX_STRING, "pset names type");
            named = NULL != strstr(results[i].value.data.string, "evens");
        } else if (0 == strcmp(results[i].key, PMIX_QUERY_PSET_MEMBERSHIP)) {
            pmix_data_array_t *d = results[i].value.data.darray;
            pmix_proc_t *ps = (pmix_proc_t *)d->array;
            for (size_t m = 0; m < d->size; m++) {
                CHECK(ps[m].rank % 2 == 0, "rank %u in evens", ps[m].rank);
            }
            evens = d->size;
        }
    }
    PMIX_INFO_FREE(results, nresults);
    PMIX_QUERY_FREE(q, 2);
    CHECK(named && evens == (size + 1) / 2, "pset evens: named %d, %zu members", named, evens);
    v = get(&me, PMIX_PSET_NAMES, PMIX_DATA_ARRAY);
    {
        pmix_data_array_t *d = v->data.darray;
        int in_evens = 0;
        for (size_t n = 0; d->type == PMIX_STRING && n < d->size; n++) {
            in_evens |= 0 == strcmp(((char **)d->array)[n], "evens");
        }
        CHECK(in_evens == (me.rank % 2 == 0), "PMIX_PSET_NAMES: in evens %d", in_evens);
    }
    PMIX_VALUE_RELEASE(v);

    /* The invite method: rank 0 invites rank 1, whose handler joins. */
    pmix_status_t invited = PMIX_GROUP_INVITED;
    if (me.rank == 1) {
        OK(PMIx_Register_event_handler(&invited, 1, NULL, 0, on_invited, NULL, NULL) >= 0
               ? PMIX_SUCCESS : PMIX_ERROR);
    }
    OK(PMIx_Fence(NULL, 0, NULL, 0));
    if (me.rank == 0) {
        pmix_proc_t guest;
        PMIX_LOAD_PROCID(&guest, me.nspace, 1);
        results = NULL;
        nresults = 0;
        OK(PMIx_Group_invite("demo-inv", &guest, 1, NULL, 0, &results, &nresults));
        size_t n = 0;
        for (size_t i = 0; i < nresults; i++) {
            if (0 == strcmp(results[i].key, PMIX_GROUP_MEMBERSHIP)) {
                n = results[i].value.data.darray->size;
            }
        }
        PMIX_INFO_FREE(results, nresults);
        CHECK(n == 2, "the invited group has %zu members", n);
    } else if (me.rank == 1) {
        CHECK(wait_for(&join_done) == 1 && atomic_load(&join_members) == 2,
              "PMIx_Group_join_nb: %d, %zu members", atomic_load(&join_done),
              atomic_load(&join_members));
    }
    if (me.rank < 2) {
        OK(PMIx_Group_destruct("demo-inv", NULL, 0));
    }

    /* The non-blocking construct, then a connect and disconnect of the job. */
    OK(PMIx_Group_construct_nb("demo-grp-nb", &wild, 1, NULL, 0, on_group, NULL));
    CHECK(wait_for(&grp_done) == 1 && atomic_load(&grp_members) == size,
          "PMIx_Group_construct_nb: %d, %zu members", atomic_load(&grp_done),
          atomic_load(&grp_members));
    OK(PMIx_Group_destruct("demo-grp-nb", NULL, 0));
    OK(PMIx_Connect(&wild, 1, NULL, 0));
    OK(PMIx_Disconnect(&wild, 1, NULL, 0));
    OK(PMIx_Deregister_event_handler(atomic_load(&reg_ref), NULL, NULL));
    /* A spawn of nothing is refused (cluster-tests/c/pmix_spawn.c spawns); calls the
     * library does not implement answer PMIX_ERR_NOT_SUPPORTED. */
    CHECK(PMIx_Spawn(NULL, 0, NULL, 0, NULL) == PMIX_ERR_BAD_PARAM, "a spawn of nothing");
    pmix_info_t *alloc = NULL;
    size_t nalloc = 0;
    CHECK(PMIx_Allocation_request(PMIX_ALLOC_NEW, NULL, 0, &alloc, &nalloc) == PMIX_ERR_NOT_SUPPORTED,
          "allocation requests are supported?");

    printf("RESULT size=%u nodes=%u members=%zu ctx=%zu\n", size, nodes, members, ctx);
    fflush(stdout);
    /* PMIX_EMBED_BARRIER: finalize fences the job first. The last rank leaves a marker
     * 300 ms late, before its finalize; rank 0's finalize must not return before. */
    char marker[PMIX_MAX_NSLEN + 64];
    snprintf(marker, sizeof marker, "/tmp/cohort-pmix-demo-%s.finalize", me.nspace);
    if (me.rank == size - 1) {
        usleep(300 * 1000);
        FILE *f = fopen(marker, "w");
        CHECK(f != NULL, "cannot create %s", marker);
        fclose(f);
    }
    pmix_info_t barrier;
    PMIX_INFO_LOAD(&barrier, PMIX_EMBED_BARRIER, &yes, PMIX_BOOL);
    OK(PMIx_Finalize(&barrier, 1));
    PMIX_INFO_DESTRUCT(&barrier);
    if (me.rank == 0) {
        CHECK(access(marker, F_OK) == 0,
              "PMIx_Finalize with PMIX_EMBED_BARRIER returned before rank %u finalized",
              size - 1);
        unlink(marker);
    }
    return 0;
}
