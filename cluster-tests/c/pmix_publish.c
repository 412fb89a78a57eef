/* PMIx_Publish / PMIx_Lookup / PMIx_Unpublish and their _nb forms, written against
 * OpenPMIx's <pmix.h> only, run under `cohort run` with cohort's libpmix.so.2
 * (cluster-tests/tests/pmix.rs). It checks the PMIx standard's rules ("Publish/Lookup
 * Operations"): a waiting lookup, PMIX_ERR_DUPLICATE_KEY in one range and not across
 * ranges, PMIX_ERR_PARTIAL_SUCCESS / PMIX_ERR_NOT_FOUND, the local and proc-local
 * ranges, first-read persistence, and unpublish freeing a key. Every rank checks each
 * answer itself and prints "FAIL rank R: ..." to stderr on a violation (exit 1); on
 * success it prints one "RESULT ..." line, the same on every rank. */
#include <pmix.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmix_check.h"

static pmix_proc_t me;

static void fence(void)
{
    pmix_status_t rc;
    OK(PMIx_Fence(NULL, 0, NULL, 0));
}

/* Publishes key=value (a uint32) in `range` with `persistence`; returns the status. */
static pmix_status_t publish(const char *key, uint32_t value, pmix_data_range_t range,
                             pmix_persistence_t persistence)
{
    pmix_info_t info[3];
    PMIX_INFO_LOAD(&info[0], key, &value, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[1], PMIX_RANGE, &range, PMIX_DATA_RANGE);
    PMIX_INFO_LOAD(&info[2], PMIX_PERSISTENCE, &persistence, PMIX_PERSIST);
    pmix_status_t rc = PMIx_Publish(info, 3);
    for (int i = 0; i < 3; i++) {
        PMIX_INFO_DESTRUCT(&info[i]);
    }
    return rc;
}

/* Looks `key` up in `range`; on success stores its value and publisher. */
static pmix_status_t lookup(const char *key, pmix_data_range_t range, int wait_s,
                            uint32_t *value, pmix_proc_t *publisher)
{
    pmix_pdata_t pdata;
    PMIX_PDATA_CONSTRUCT(&pdata);
    PMIX_LOAD_KEY(pdata.key, key);
    pmix_info_t info[3];
    size_t n = 1;
    PMIX_INFO_LOAD(&info[0], PMIX_RANGE, &range, PMIX_DATA_RANGE);
    if (wait_s > 0) {
        bool yes = true;
        PMIX_INFO_LOAD(&info[1], PMIX_WAIT, &yes, PMIX_BOOL);
        PMIX_INFO_LOAD(&info[2], PMIX_TIMEOUT, &wait_s, PMIX_INT);
        n = 3;
    }
    pmix_status_t rc = PMIx_Lookup(&pdata, 1, info, n);
    if (rc == PMIX_SUCCESS) {
        CHECK(pdata.value.type == PMIX_UINT32, "%s: type %d", key, pdata.value.type);
        *value = pdata.value.data.uint32;
        if (publisher) {
            *publisher = pdata.proc;
        }
    } else {
        CHECK(pdata.value.type == PMIX_UNDEF, "%s not found but typed %d", key, pdata.value.type);
    }
    PMIX_PDATA_DESTRUCT(&pdata);
    for (size_t i = 0; i < n; i++) {
        PMIX_INFO_DESTRUCT(&info[i]);
    }
    return rc;
}

static atomic_int nb_done = 0;
static atomic_int nb_status = 1;
static atomic_uint nb_value = 0;
static atomic_uint nb_publisher = 0;
static atomic_size_t nb_count = 99;

static void on_lookup(pmix_status_t status, pmix_pdata_t data[], size_t ndata, void *cbdata)
{
    (void)cbdata;
    atomic_store(&nb_count, ndata);
    if (ndata == 1 && data[0].value.type == PMIX_UINT32) {
        atomic_store(&nb_value, data[0].value.data.uint32);
        atomic_store(&nb_publisher, data[0].proc.rank);
    }
    atomic_store(&nb_status, status);
    atomic_store(&nb_done, 1);
}

static void on_op(pmix_status_t status, void *cbdata)
{
    (void)cbdata;
    atomic_store(&nb_status, status);
    atomic_store(&nb_done, 1);
}

static pmix_status_t await_nb(void)
{
    for (int i = 0; i < 30000 && !atomic_load(&nb_done); i++) {
        usleep(1000);
    }
    CHECK(atomic_load(&nb_done), "a non-blocking call never completed");
    atomic_store(&nb_done, 0);
    return atomic_load(&nb_status);
}

static uint32_t node_of(uint32_t rank)
{
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, me.nspace, rank);
    pmix_value_t *v = NULL;
    pmix_status_t rc;
    OK(PMIx_Get(&p, PMIX_NODEID, NULL, 0, &v));
    uint32_t node = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    return node;
}

int main(void)
{
    pmix_status_t rc;
    OK(PMIx_Init(&me, NULL, 0));
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *v = NULL;
    OK(PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v));
    uint32_t size = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    CHECK(size >= 2, "needs 2 ranks or more, got %u", size);
    uint32_t value = 0;
    pmix_proc_t publisher;

    /* 1. Every other rank waits (PMIX_WAIT, Lookup_nb) for what rank 0 publishes
     * after a fence. */
    if (me.rank != 0) {
        char *keys[] = {"port", NULL};
        pmix_info_t info[2];
        bool yes = true;
        int secs = 60;
        PMIX_INFO_LOAD(&info[0], PMIX_WAIT, &yes, PMIX_BOOL);
        PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
        OK(PMIx_Lookup_nb(keys, info, 2, on_lookup, NULL));
        PMIX_INFO_DESTRUCT(&info[0]);
        PMIX_INFO_DESTRUCT(&info[1]);
    }
    fence();
    if (me.rank == 0) {
        CHECK(publish("port", 4242, PMIX_RANGE_SESSION, PMIX_PERSIST_APP) == PMIX_SUCCESS, "publish port");
    } else {
        CHECK(await_nb() == PMIX_SUCCESS, "waiting lookup of port: %d", atomic_load(&nb_status));
        CHECK(atomic_load(&nb_count) == 1 && atomic_load(&nb_value) == 4242 &&
                  atomic_load(&nb_publisher) == 0,
              "waiting lookup found %zu, value %u from rank %u", atomic_load(&nb_count),
              atomic_load(&nb_value), atomic_load(&nb_publisher));
    }
    fence();

    /* 2. The same key in the same range is a duplicate; in another range it is not. */
    int dup = 0;
    if (me.rank == 1) {
        rc = publish("port", 1, PMIX_RANGE_SESSION, PMIX_PERSIST_APP);
        CHECK(rc == PMIX_ERR_DUPLICATE_KEY, "second publish of port: %s (%d)", PMIx_Error_string(rc), rc);
        CHECK(publish("port", 7, PMIX_RANGE_NAMESPACE, PMIX_PERSIST_APP) == PMIX_SUCCESS,
              "port in the namespace range");
    }
    fence();
    CHECK(lookup("port", PMIX_RANGE_SESSION, 0, &value, &publisher) == PMIX_SUCCESS && value == 4242 &&
              publisher.rank == 0 && 0 == strcmp(publisher.nspace, me.nspace),
          "session port: %u from %u", value, publisher.rank);
    CHECK(lookup("port", PMIX_RANGE_NAMESPACE, 0, &value, NULL) == PMIX_SUCCESS && value == 7,
          "namespace port: %u", value);
    CHECK(lookup("port", PMIX_RANGE_GLOBAL, 0, &value, NULL) == PMIX_ERR_NOT_FOUND, "global port");
    dup = 1;

    /* 3. Two keys, one missing: partial success, the missing one PMIX_UNDEF. */
    pmix_pdata_t two[2];
    PMIX_PDATA_CONSTRUCT(&two[0]);
    PMIX_PDATA_CONSTRUCT(&two[1]);
    PMIX_LOAD_KEY(two[0].key, "port");
    PMIX_LOAD_KEY(two[1].key, "no-such-key");
    rc = PMIx_Lookup(two, 2, NULL, 0);
    CHECK(rc == PMIX_ERR_PARTIAL_SUCCESS, "partial lookup: %s (%d)", PMIx_Error_string(rc), rc);
    CHECK(two[0].value.type == PMIX_UINT32 && two[0].value.data.uint32 == 4242 &&
              two[1].value.type == PMIX_UNDEF,
          "partial lookup types %d / %d", two[0].value.type, two[1].value.type);
    PMIX_PDATA_DESTRUCT(&two[0]);
    PMIX_PDATA_DESTRUCT(&two[1]);

    /* 4. Proc-local: every rank publishes its own "mine" and reads its own back. */
    CHECK(publish("mine", 100 + me.rank, PMIX_RANGE_PROC_LOCAL, PMIX_PERSIST_APP) == PMIX_SUCCESS,
          "proc-local publish");
    fence();
    CHECK(lookup("mine", PMIX_RANGE_PROC_LOCAL, 0, &value, NULL) == PMIX_SUCCESS && value == 100 + me.rank,
          "proc-local mine: %u", value);

    /* 5. Local: every rank tries "lk"; one per node wins, and each rank finds its own
     * node's winner. */
    rc = publish("lk", me.rank, PMIX_RANGE_LOCAL, PMIX_PERSIST_APP);
    CHECK(rc == PMIX_SUCCESS || rc == PMIX_ERR_DUPLICATE_KEY, "local publish: %d", rc);
    fence();
    CHECK(lookup("lk", PMIX_RANGE_LOCAL, 0, &value, NULL) == PMIX_SUCCESS, "local lk");
    CHECK(node_of(value) == node_of(me.rank), "lk from rank %u of another node", value);
    int local = 1;

    /* 6. First read: rank 0 publishes "token" once; every other rank tries to read it
     * (waiting 2 s at most); exactly one gets it. Each tells the others what it got,
     * through the data store. */
    if (me.rank == 0) {
        CHECK(publish("token", 9, PMIX_RANGE_SESSION, PMIX_PERSIST_FIRST_READ) == PMIX_SUCCESS,
              "token");
        CHECK(publish("read-0", 0, PMIX_RANGE_SESSION, PMIX_PERSIST_APP) == PMIX_SUCCESS, "read-0");
    } else {
        rc = lookup("token", PMIX_RANGE_SESSION, 2, &value, NULL);
        CHECK(rc == PMIX_SUCCESS || rc == PMIX_ERR_TIMEOUT, "token: %s (%d)", PMIx_Error_string(rc), rc);
        char key[32];
        snprintf(key, sizeof key, "read-%u", me.rank);
        CHECK(publish(key, rc == PMIX_SUCCESS, PMIX_RANGE_SESSION, PMIX_PERSIST_APP) == PMIX_SUCCESS,
              "%s", key);
    }
    fence();
    uint32_t winners = 0;
    for (uint32_t r = 0; r < size; r++) {
        char key[32];
        snprintf(key, sizeof key, "read-%u", r);
        CHECK(lookup(key, PMIX_RANGE_SESSION, 0, &value, NULL) == PMIX_SUCCESS, "%s", key);
        winners += value;
    }
    CHECK(winners == 1, "%u ranks read the first-read token", winners);

    /* 7. Unpublish (non-blocking) frees the key for another publisher. */
    if (me.rank == 0) {
        char *keys[] = {"port", NULL};
        OK(PMIx_Unpublish_nb(keys, NULL, 0, on_op, NULL));
        CHECK(await_nb() == PMIX_SUCCESS, "unpublish_nb: %d", atomic_load(&nb_status));
    }
    fence();
    if (me.rank == size - 1) {
        pmix_info_t info;
        uint32_t again = 5;
        PMIX_INFO_LOAD(&info, "port", &again, PMIX_UINT32);
        OK(PMIx_Publish_nb(&info, 1, on_op, NULL));
        CHECK(await_nb() == PMIX_SUCCESS, "publish_nb after unpublish: %d", atomic_load(&nb_status));
        PMIX_INFO_DESTRUCT(&info);
    }
    fence();
    CHECK(lookup("port", PMIX_RANGE_SESSION, 0, &value, &publisher) == PMIX_SUCCESS && value == 5 &&
              publisher.rank == size - 1,
          "republished port: %u from %u", value, publisher.rank);
    fence();
    OK(PMIx_Unpublish(NULL, NULL, 0));

    printf("RESULT size=%u waited=1 duplicate=%d partial=1 proc_local=1 local=%d first_read_winners=%u "
           "republished=1\n",
           size, dup, local, winners);
    fflush(stdout);
    OK(PMIx_Finalize(NULL, 0));
    return 0;
}
