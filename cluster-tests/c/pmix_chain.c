/* PMIx event handler chains (cluster-tests/tests/pmix.rs; 2 ranks): a handler's
 * completion callback, called from another thread after the handler returned, is
 * what lets the event go on to the next handler (pmix-standard, event notification:
 * the next handler in the chain is called once the previous one called its cbfunc,
 * and PMIX_EVENT_ACTION_COMPLETE ends the chain).
 *
 * Rank 0 registers, for one code each:
 *   - A (CHAIN_GO): calls its cbfunc with PMIX_SUCCESS 300 ms later, from a thread,
 *     with results chain.a = 7 (PMIX_INT) and chain.who = "a", freed by its own
 *     release callback;
 *   - S (CHAIN_STOP): calls it with PMIX_EVENT_ACTION_COMPLETE 100 ms later;
 *   - H (CHAIN_HELD): never calls it;
 * then M for CHAIN_GO and CHAIN_LAST (several codes: after those), which checks the
 * results it is given (A's for CHAIN_GO, none for CHAIN_LAST) and answers at once
 * with chain.who = "m" and chain.m = 3 (PMIX_UINT16); and a default handler D (every
 * code), which runs last. Rank 1 notifies CHAIN_GO, CHAIN_STOP, CHAIN_HELD and
 * CHAIN_LAST. Rank 0 checks that D got CHAIN_GO only after A's callback, with the
 * chain's results aggregated (chain.a 7, chain.who "m", chain.m 3, in that order,
 * as PMIx hands each handler the results of those before it), never got CHAIN_STOP
 * or CHAIN_HELD, and got CHAIN_LAST (a held chain holds only its own event). Both
 * ranks print "RESULT chain ok"; a violation prints "FAIL rank R: ..." and exits 1. */
#include <pmix.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmix_check.h"

static pmix_proc_t me;

#define CHAIN_GO (PMIX_EXTERNAL_ERR_BASE - 41)
#define CHAIN_STOP (PMIX_EXTERNAL_ERR_BASE - 42)
#define CHAIN_HELD (PMIX_EXTERNAL_ERR_BASE - 43)
#define CHAIN_LAST (PMIX_EXTERNAL_ERR_BASE - 44)

static atomic_int a_answered;     /* A called its cbfunc */
static atomic_int d_go, d_stop, d_held, d_last;
static atomic_int d_go_after_a;   /* when D got CHAIN_GO, A had answered */
static atomic_int held_called, stop_called;
static atomic_int a_released;     /* A's results were handed back to it */
static atomic_int m_go_ok, m_last_ok, d_go_results_ok;

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A deferred answer: after `ms`, `status` through the handler's cbfunc (with
 * results, given back to `release` once used). */
struct later {
    long ms;
    pmix_status_t status;
    atomic_int *answered;
    pmix_event_notification_cbfunc_fn_t cbfunc;
    void *cbdata;
    pmix_info_t *results;
    size_t nresults;
};

/* The release callback of A's results: the library is done with them. */
static void release_results(pmix_status_t status, void *cbdata)
{
    (void)status;
    struct later *l = cbdata;
    PMIX_INFO_FREE(l->results, l->nresults);
    atomic_store(&a_released, 1);
    free(l);
}

static void *answer_later(void *arg)
{
    struct later *l = arg;
    sleep_ms(l->ms);
    if (l->answered != NULL) {
        atomic_store(l->answered, 1);
    }
    if (l->results != NULL) {
        l->cbfunc(l->status, l->results, l->nresults, release_results, l, l->cbdata);
        return NULL;
    }
    l->cbfunc(l->status, NULL, 0, NULL, NULL, l->cbdata);
    free(l);
    return NULL;
}

static void defer_with(long ms, pmix_status_t status, atomic_int *answered,
                       pmix_info_t *results, size_t nresults,
                       pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    struct later *l = malloc(sizeof *l);
    CHECK(l != NULL && cbfunc != NULL, "no cbfunc to answer with");
    *l = (struct later){ms, status, answered, cbfunc, cbdata, results, nresults};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, answer_later, l) == 0, "pthread_create");
    pthread_detach(t);
}

static void defer(long ms, pmix_status_t status, atomic_int *answered,
                  pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    defer_with(ms, status, answered, NULL, 0, cbfunc, cbdata);
}

/* Whether `r` is `key` = string `want`. */
static bool is_str(const pmix_info_t *r, const char *key, const char *want)
{
    return PMIX_CHECK_KEY(r, key) && r->value.type == PMIX_STRING &&
           0 == strcmp(r->value.data.string, want);
}

static void on_go(size_t id, pmix_status_t status, const pmix_proc_t *source, pmix_info_t info[],
                  size_t ninfo, pmix_info_t *results, size_t nresults,
                  pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)status; (void)source; (void)info; (void)ninfo; (void)results; (void)nresults;
    pmix_info_t *mine;
    PMIX_INFO_CREATE(mine, 2);
    int seven = 7;
    PMIX_INFO_LOAD(&mine[0], "chain.a", &seven, PMIX_INT);
    PMIX_INFO_LOAD(&mine[1], "chain.who", "a", PMIX_STRING);
    defer_with(300, PMIX_SUCCESS, &a_answered, mine, 2, cbfunc, cbdata);
}

static void on_multi(size_t id, pmix_status_t status, const pmix_proc_t *source,
                     pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                     pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)source; (void)info; (void)ninfo;
    if (status == CHAIN_GO) {
        atomic_store(&m_go_ok, nresults == 2 && PMIX_CHECK_KEY(&results[0], "chain.a") &&
                                   results[0].value.type == PMIX_INT &&
                                   results[0].value.data.integer == 7 &&
                                   is_str(&results[1], "chain.who", "a"));
    } else if (status == CHAIN_LAST) {
        atomic_store(&m_last_ok, nresults == 0 && results == NULL);
    }
    pmix_info_t mine[2];
    uint16_t three = 3;
    PMIX_INFO_LOAD(&mine[0], "chain.who", "m", PMIX_STRING);
    PMIX_INFO_LOAD(&mine[1], "chain.m", &three, PMIX_UINT16);
    /* copied during the call: a stack array is fine without a release callback */
    cbfunc(PMIX_SUCCESS, mine, 2, NULL, NULL, cbdata);
    PMIX_INFO_DESTRUCT(&mine[0]);
    PMIX_INFO_DESTRUCT(&mine[1]);
}

static void on_stop(size_t id, pmix_status_t status, const pmix_proc_t *source,
                    pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                    pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)status; (void)source; (void)info; (void)ninfo; (void)results; (void)nresults;
    atomic_store(&stop_called, 1);
    defer(100, PMIX_EVENT_ACTION_COMPLETE, NULL, cbfunc, cbdata);
}

static void on_held(size_t id, pmix_status_t status, const pmix_proc_t *source,
                    pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                    pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)status; (void)source; (void)info; (void)ninfo; (void)results; (void)nresults;
    (void)cbfunc; (void)cbdata;
    atomic_store(&held_called, 1);
}

static void on_default(size_t id, pmix_status_t status, const pmix_proc_t *source,
                       pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                       pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)source; (void)info; (void)ninfo; (void)results; (void)nresults;
    if (status == CHAIN_GO) {
        atomic_store(&d_go_after_a, atomic_load(&a_answered));
        atomic_store(&d_go_results_ok,
                     nresults == 3 && PMIX_CHECK_KEY(&results[0], "chain.a") &&
                         results[0].value.type == PMIX_INT &&
                         results[0].value.data.integer == 7 &&
                         is_str(&results[1], "chain.who", "m") &&
                         PMIX_CHECK_KEY(&results[2], "chain.m") &&
                         results[2].value.type == PMIX_UINT16 &&
                         results[2].value.data.uint16 == 3);
        atomic_store(&d_go, 1);
    } else if (status == CHAIN_STOP) {
        atomic_store(&d_stop, 1);
    } else if (status == CHAIN_HELD) {
        atomic_store(&d_held, 1);
    } else if (status == CHAIN_LAST) {
        atomic_store(&d_last, 1);
    }
    if (NULL != cbfunc) {
        cbfunc(PMIX_SUCCESS, NULL, 0, NULL, NULL, cbdata);
    }
}

static void wait_for(atomic_int *flag, const char *what)
{
    for (int i = 0; i < 30000 && !atomic_load(flag); i++) {
        sleep_ms(1);
    }
    CHECK(atomic_load(flag), "%s within 30 s", what);
}

static void register_one(pmix_status_t code, pmix_notification_fn_t fn)
{
    pmix_status_t c = code;
    CHECK(PMIx_Register_event_handler(&c, 1, NULL, 0, fn, NULL, NULL) >= 0, "register %d",
          code);
}

int main(void)
{
    pmix_status_t rc;
    OK(PMIx_Init(&me, NULL, 0));
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    if (me.rank == 0) {
        register_one(CHAIN_GO, on_go);
        register_one(CHAIN_STOP, on_stop);
        register_one(CHAIN_HELD, on_held);
        pmix_status_t two[] = {CHAIN_GO, CHAIN_LAST};
        CHECK(PMIx_Register_event_handler(two, 2, NULL, 0, on_multi, NULL, NULL) >= 0,
              "register M");
        CHECK(PMIx_Register_event_handler(NULL, 0, NULL, 0, on_default, NULL, NULL) >= 0,
              "register the default handler");
    }
    OK(PMIx_Fence(&job, 1, NULL, 0));
    if (me.rank == 1) {
        pmix_proc_t target;
        PMIX_LOAD_PROCID(&target, me.nspace, 0);
        pmix_info_t to;
        PMIX_INFO_LOAD(&to, PMIX_EVENT_CUSTOM_RANGE, &target, PMIX_PROC);
        pmix_status_t codes[] = {CHAIN_GO, CHAIN_STOP, CHAIN_HELD, CHAIN_LAST};
        for (size_t i = 0; i < 4; i++) {
            OK(PMIx_Notify_event(codes[i], &me, PMIX_RANGE_CUSTOM, &to, 1, NULL, NULL));
        }
        PMIX_INFO_DESTRUCT(&to);
    } else {
        wait_for(&d_go, "the default handler got CHAIN_GO");
        CHECK(atomic_load(&d_go_after_a), "the default handler got CHAIN_GO before A answered");
        CHECK(atomic_load(&m_go_ok), "M did not get A's results (chain.a 7, chain.who a)");
        CHECK(atomic_load(&d_go_results_ok),
              "the default handler did not get the chain's results (chain.a 7, chain.who m, "
              "chain.m 3)");
        wait_for(&a_released, "A's results were released through its callback");
        wait_for(&d_last, "the default handler got CHAIN_LAST");
        CHECK(atomic_load(&m_last_ok), "M got results for CHAIN_LAST, which no handler gave");
        wait_for(&stop_called, "S was called");
        wait_for(&held_called, "H was called");
        sleep_ms(500); /* S answered after 100 ms; give a wrong delivery time to show */
        CHECK(!atomic_load(&d_stop), "the default handler got CHAIN_STOP after ACTION_COMPLETE");
        CHECK(!atomic_load(&d_held), "the default handler got CHAIN_HELD, whose chain is held");
    }
    OK(PMIx_Fence(&job, 1, NULL, 0));
    printf("RESULT chain ok\n");
    fflush(stdout);
    OK(PMIx_Finalize(NULL, 0));
    return 0;
}
