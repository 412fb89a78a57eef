/* PMIx event handler chains (cluster-tests/tests/pmix.rs; 2 ranks): a handler's
 * completion callback, called from another thread after the handler returned, is
 * what lets the event go on to the next handler (pmix-standard, event notification:
 * the next handler in the chain is called once the previous one called its cbfunc,
 * and PMIX_EVENT_ACTION_COMPLETE ends the chain).
 *
 * Rank 0 registers, for one code each:
 *   - A (CHAIN_GO): calls its cbfunc with PMIX_SUCCESS 300 ms later, from a thread;
 *   - S (CHAIN_STOP): calls it with PMIX_EVENT_ACTION_COMPLETE 100 ms later;
 *   - H (CHAIN_HELD): never calls it;
 * and a default handler D (every code), which runs after those. Rank 1 notifies
 * CHAIN_GO, CHAIN_STOP, CHAIN_HELD and CHAIN_LAST. Rank 0 checks that D got
 * CHAIN_GO only after A's callback, never got CHAIN_STOP or CHAIN_HELD, and got
 * CHAIN_LAST (a held chain holds only its own event). Both ranks print
 * "RESULT chain ok"; a violation prints "FAIL rank R: ..." and exits 1. */
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

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A deferred answer: after `ms`, `status` through the handler's cbfunc. */
struct later {
    long ms;
    pmix_status_t status;
    atomic_int *answered;
    pmix_event_notification_cbfunc_fn_t cbfunc;
    void *cbdata;
};

static void *answer_later(void *arg)
{
    struct later *l = arg;
    sleep_ms(l->ms);
    if (l->answered != NULL) {
        atomic_store(l->answered, 1);
    }
    l->cbfunc(l->status, NULL, 0, NULL, NULL, l->cbdata);
    free(l);
    return NULL;
}

static void defer(long ms, pmix_status_t status, atomic_int *answered,
                  pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    struct later *l = malloc(sizeof *l);
    CHECK(l != NULL && cbfunc != NULL, "no cbfunc to answer with");
    *l = (struct later){ms, status, answered, cbfunc, cbdata};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, answer_later, l) == 0, "pthread_create");
    pthread_detach(t);
}

static void on_go(size_t id, pmix_status_t status, const pmix_proc_t *source, pmix_info_t info[],
                  size_t ninfo, pmix_info_t *results, size_t nresults,
                  pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id; (void)status; (void)source; (void)info; (void)ninfo; (void)results; (void)nresults;
    defer(300, PMIX_SUCCESS, &a_answered, cbfunc, cbdata);
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
        wait_for(&d_last, "the default handler got CHAIN_LAST");
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
