/*
 * cohort.h — C interface of the cohort client library (libcohort_c).
 *
 * A process started by `cohort run` calls cohort_init() to connect to its node
 * server, then puts, commits, gets, fences and builds process groups (PMIx groups,
 * collective method), as the Rust crate `cohort` does. Every call blocks until its
 * answer. Link with -lcohort_c (shared or static library in cargo's target dir), or,
 * installed (`make install`), with `pkg-config --cflags --libs cohort` (-lcohort).
 *
 * Errors: every function returning int returns COHORT_SUCCESS (0) or a negative
 * COHORT_ERR_* status; cohort_last_error() then gives the message of the calling
 * thread's last failure, naming the group, process or node server involved.
 *
 * Memory: results handed out by the library (values, groups, process lists) are
 * released with the matching cohort_*_free function. Strings passed in are
 * NUL-terminated UTF-8.
 */
#ifndef COHORT_H
#define COHORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest namespace or group id, in bytes (PMIX_MAX_NSLEN). */
#define COHORT_MAX_NSLEN 255
/* All ranks of a namespace or group (PMIX_RANK_WILDCARD). */
#define COHORT_RANK_WILDCARD UINT32_MAX

/* Status codes. */
#define COHORT_SUCCESS 0
#define COHORT_ERR_BAD_PARAM -1         /* a NULL, non-UTF-8 or over-long argument */
#define COHORT_ERR_INVALID_GROUP_ID -2
#define COHORT_ERR_UNKNOWN_PROC -3
#define COHORT_ERR_GROUP_NOT_FOUND -4
#define COHORT_ERR_NOT_A_MEMBER -5
#define COHORT_ERR_GROUP_ID_IN_USE -6
#define COHORT_ERR_MISMATCH -7          /* callers disagree (leader list or count, …) */
#define COHORT_ERR_NOT_LEADER -8
#define COHORT_ERR_TIMEOUT -9
#define COHORT_ERR_PROC_TERMINATED -10
#define COHORT_ERR_NOT_FOUND -11
#define COHORT_ERR_PEER_LOST -12        /* a node server was lost */
#define COHORT_ERR_CONSTRUCT_ABORTED -13
#define COHORT_ERR_BAD_REQUEST -14
#define COHORT_ERR_SERVER_LOST -15      /* the connection to this node server */
#define COHORT_ERR_AUTH_REFUSED -16
#define COHORT_ERR_PROTOCOL -17
#define COHORT_ERR_IO -18
#define COHORT_ERR_NOT_SUPPORTED -19
#define COHORT_ERR_PSET_NOT_FOUND -20
#define COHORT_ERR_KEY_PUBLISHED -21    /* a key already published in that range */

/* Scopes of put (PMIX_LOCAL, PMIX_REMOTE, PMIX_GLOBAL). */
#define COHORT_SCOPE_LOCAL 0
#define COHORT_SCOPE_REMOTE 1
#define COHORT_SCOPE_GLOBAL 2

/* Types of cohort_value_t. */
#define COHORT_VALUE_BOOL 1
#define COHORT_VALUE_U32 2
#define COHORT_VALUE_U64 3
#define COHORT_VALUE_I64 4
#define COHORT_VALUE_F64 5
#define COHORT_VALUE_STRING 6   /* str: NUL-terminated */
#define COHORT_VALUE_BYTES 7    /* bytes, len */
#define COHORT_VALUE_PROCS 8    /* procs, len */
#define COHORT_VALUE_OTHER 9    /* a type this interface does not carry; str: its text */
#define COHORT_VALUE_STRINGS 10 /* strs, len (e.g. "pmix.pset.nms") */

/* Ranges of cohort_notify (PMIX_RANGE_*). */
#define COHORT_RANGE_LOCAL 0      /* every process on this node */
#define COHORT_RANGE_NAMESPACE 1  /* target: a namespace (NULL: this process's) */
#define COHORT_RANGE_SESSION 2
#define COHORT_RANGE_GROUP 3      /* target: a group id */
#define COHORT_RANGE_PROCS 4      /* procs, nprocs */

/* Ranges of published data (PMIX_RANGE_* of publish/lookup; 0, the default: session).
 * A lookup finds what was published in the same kind of range (custom: the same
 * processes) that includes the caller. */
#define COHORT_DATA_RANGE_SESSION 0
#define COHORT_DATA_RANGE_NAMESPACE 1
#define COHORT_DATA_RANGE_LOCAL 2      /* processes on the publisher's node */
#define COHORT_DATA_RANGE_PROC_LOCAL 3 /* the publisher only */
#define COHORT_DATA_RANGE_GLOBAL 4
#define COHORT_DATA_RANGE_CUSTOM 5     /* procs, nprocs */

/* Persistence of published data (PMIX_PERSIST_*; 0, the default: the application's,
 * which in a cohort job is the job's). */
#define COHORT_PERSIST_APP 0
#define COHORT_PERSIST_INDEF 1         /* until unpublished */
#define COHORT_PERSIST_FIRST_READ 2    /* until one lookup returned it */
#define COHORT_PERSIST_PROC 3          /* until the publisher terminates */
#define COHORT_PERSIST_SESSION 4

/* Placement of a spawn's processes (PMIX_MAPBY; 0, the default: block-wise). */
#define COHORT_MAP_BLOCK 0       /* block-wise over the node servers, as `cohort run` */
#define COHORT_MAP_ROUND_ROBIN 1 /* one per node server in turn (map-by node) */
#define COHORT_MAP_PER_NODE 2    /* per_node processes on each node server in turn
                                    (ppr:K:node); more than fit is refused */

/* cohort_lookup_opts_t.wait: wait until every key is published. */
#define COHORT_WAIT_ALL -1

/* Event codes (the same values as the Rust crate's `cohort::codes`). */
#define COHORT_EVENT_GROUP_INVITED -159
#define COHORT_EVENT_GROUP_LEFT -160
#define COHORT_EVENT_GROUP_INVITE_ACCEPTED -161
#define COHORT_EVENT_GROUP_INVITE_DECLINED -162
#define COHORT_EVENT_GROUP_INVITE_FAILED -163
#define COHORT_EVENT_GROUP_MEMBERSHIP_UPDATE -164
#define COHORT_EVENT_GROUP_CONSTRUCT_ABORT -165
#define COHORT_EVENT_GROUP_CONSTRUCT_COMPLETE -166
#define COHORT_EVENT_GROUP_LEADER_SELECTED -167
#define COHORT_EVENT_GROUP_LEADER_FAILED -168
#define COHORT_EVENT_GROUP_CONTEXT_ID_ASSIGNED -169
#define COHORT_EVENT_GROUP_MEMBER_FAILED -170
#define COHORT_EVENT_PROC_HAS_CONNECTED -171
#define COHORT_EVENT_PROC_HAS_DISCONNECTED -172
#define COHORT_EVENT_PROC_TERMINATED -201
#define COHORT_EVENT_LOST_CONNECTION -61
#define COHORT_EVENT_JOB_END -145
#define COHORT_EVENT_PROCESS_SET_DEFINE -55 /* info "pmix.pset.nm", "pmix.pset.mems" */
#define COHORT_EVENT_PROCESS_SET_DELETE -56 /* info "pmix.pset.nm" */

typedef struct cohort_client cohort_client_t; /* opaque */

typedef struct {
    char nspace[COHORT_MAX_NSLEN + 1];
    uint32_t rank;
} cohort_proc_t;

typedef struct {
    int type;          /* COHORT_VALUE_* */
    int boolean;
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    double f64;
    char *str;
    void *bytes;
    cohort_proc_t *procs;
    char **strs;
    size_t len;
} cohort_value_t;

/* A key and its value (PMIx's pmix_info_t). In a list passed in, `key` and the field
 * of `value` that `value.type` names (with `len` where the type has one) are the
 * caller's; COHORT_VALUE_OTHER cannot be passed in. A list handed out is the
 * library's and lives as its owner (a group, an event) does. */
typedef struct {
    char *key;
    cohort_value_t value;
} cohort_info_t;

/* One member's contribution to a group's info (PMIX_GROUP_INFO). */
typedef struct {
    cohort_proc_t member;
    char *key;
    cohort_value_t value;
} cohort_group_info_t;

/* Options of a group construct (the PMIX_GROUP_* directives). Zero-initialize. */
typedef struct {
    int timeout_ms;          /* <= 0: none */
    int optional;            /* PMIX_GROUP_OPTIONAL */
    int leader;              /* PMIX_GROUP_LEADER */
    int notify_termination;  /* PMIX_GROUP_NOTIFY_TERMINATION */
    int assign_context_id;   /* PMIX_GROUP_ASSIGN_CONTEXT_ID */
    uint32_t bootstrap;      /* PMIX_GROUP_BOOTSTRAP: the number of leaders (0: collective
                                method); each leader then passes only itself */
    const cohort_proc_t *add_members; /* PMIX_GROUP_ADD_MEMBERS (leaders only); they
                                         call with no procs */
    size_t nadd_members;
    const cohort_info_t *group_info; /* PMIX_GROUP_INFO: this process's contribution,
                                        handed to every member with the group */
    size_t ngroup_info;
    int local_only;          /* PMIX_GROUP_LOCAL_ONLY: every participant runs on this
                                node server, and the group stays there */
} cohort_construct_opts_t;

/* Options of an invite (the caller is the leader). Zero-initialize. Declined and
 * failed invitees are dropped from the group. */
typedef struct {
    int timeout_ms;
    int assign_context_id;
    int notify_termination;
    const cohort_info_t *group_info; /* the leader's PMIX_GROUP_INFO */
    size_t ngroup_info;
} cohort_invite_opts_t;

/* What a construct returns to every member. */
typedef struct {
    cohort_proc_t *members;  /* canonical order: group rank = index */
    size_t nmembers;
    int has_context_id;
    uint64_t context_id;
    int partial;             /* optional participants terminated first */
    cohort_proc_t *failed;   /* those participants */
    size_t nfailed;
    cohort_group_info_t *info; /* every member's group info, member by member */
    size_t ninfo;
} cohort_group_t;

/* A group's failed members as a failure view reports them. */
typedef struct {
    cohort_proc_t *failed;   /* canonical order */
    size_t nfailed;
    cohort_proc_t *fresh;    /* those not in this process's previous view */
    size_t nfresh;
} cohort_failed_t;

/* Options of a connect (rfc0003's PMIX_CONNECT_* attributes). Zero-initialize. */
typedef struct {
    const char *connect_id;  /* PMIX_CONNECT_ID; NULL: none */
    int timeout_ms;
    int optional;            /* PMIX_CONNECT_OPTIONAL */
    int early_term_allowed;  /* PMIX_CONNECT_EARLY_TERM_ALLOWED */
    int xchg_only;           /* PMIX_CONNECT_XCHG_ONLY: no nspace, no rank */
    int notify_each;         /* PMIX_CONNECT_NOTIFY_EACH */
} cohort_connect_opts_t;

/* Completion callbacks of the non-blocking (_nb) calls: called once, on the library's
 * completion thread; `group` and `value` (NULL on failure, and `group` after a
 * declined join) live only during the call. Keep them short. */
/* Where published data is visible and how long it stays. Zero-initialize. */
typedef struct {
    int range;                   /* COHORT_DATA_RANGE_* */
    const cohort_proc_t *procs;  /* COHORT_DATA_RANGE_CUSTOM: its processes */
    size_t nprocs;
    int persistence;             /* COHORT_PERSIST_*; ignored by unpublish */
} cohort_publish_opts_t;

/* Directives of a lookup. Zero-initialize (session range, answer at once). */
typedef struct {
    int range;
    const cohort_proc_t *procs;
    size_t nprocs;
    int wait;        /* 0: answer at once; N > 0: once N keys are published;
                        COHORT_WAIT_ALL: once all are (PMIX_WAIT) */
    int timeout_ms;  /* a waiting lookup's limit (COHORT_ERR_TIMEOUT); <= 0: none */
} cohort_lookup_opts_t;

/* A value a lookup found, with the process that published it (pmix_pdata_t). */
typedef struct {
    char *key;
    cohort_proc_t publisher;
    cohort_value_t value;
} cohort_published_t;

/* One application of a spawn (pmix_app_t): `maxprocs` processes running argv[0]
 * (resolved through PATH on the node servers' host) with argv[1..] (argc strings),
 * plus `env` ("VAR=VAL", nenv strings) over the session's `-x` variables, in `cwd`
 * (NULL: the caller's working directory; relative: from the caller's, as OpenPMIx). */
typedef struct {
    const char *const *argv;
    size_t argc;
    uint32_t maxprocs;
    const char *const *env;
    size_t nenv;
    const char *cwd;
    const char *pset; /* NULL, or a process set these processes form while their job
                         runs (PMIX_PSET_NAME); the session's processes get
                         COHORT_EVENT_PROCESS_SET_DEFINE and _DELETE */
} cohort_spawn_app_t;

/* Options of a spawn. Zero-initialize (block-wise over every live node server). */
typedef struct {
    int mapping;              /* COHORT_MAP_* (PMIX_MAPBY) */
    const char *const *hosts; /* node server names (PMIX_HOST), nhosts strings; */
    size_t nhosts;            /* none: every live one */
    int notify_completion;    /* non-zero: a COHORT_EVENT_JOB_END event to the caller once every
                                 spawned process ended (PMIX_NOTIFY_COMPLETION) */
    int timeout_ms;           /* > 0: COHORT_ERR_TIMEOUT unless every process is started within
                                 it (PMIX_TIMEOUT; the job is then cancelled); <= 0: none */
    uint32_t per_node;        /* K of COHORT_MAP_PER_NODE (at least 1); else ignored */
    uint32_t cpus_per_proc;   /* cores per process where the session binds
                                 (PMIX_CPUS_PER_PROC); 0 or 1: one */
    const char *bind_to;      /* NULL: bound as the launched job; else none, core, hwthread,
                                 numa or package (PMIX_BINDTO) */
} cohort_spawn_opts_t;

typedef void (*cohort_op_cb)(int status, void *cbdata);
typedef void (*cohort_lookup_cb)(int status, const cohort_published_t *found, size_t nfound,
                                 void *cbdata);
typedef void (*cohort_group_cb)(int status, const cohort_group_t *group, void *cbdata);
typedef void (*cohort_value_cb)(int status, const cohort_value_t *value, void *cbdata);
typedef void (*cohort_failed_cb)(int status, const cohort_failed_t *failed, void *cbdata);
/* `nspace` is "" (and `rank` UINT32_MAX) with xchg_only or on failure. */
typedef void (*cohort_connect_cb)(int status, const char *nspace, uint32_t rank, void *cbdata);
typedef void (*cohort_spawn_cb)(int status, const char *nspace, void *cbdata);

/* An event handler. `source` and `affected` live only during the call. */
typedef void (*cohort_event_fn)(int code, const cohort_proc_t *source,
                                const cohort_proc_t *affected, size_t naffected,
                                const char *group, void *cbdata);

/* An event with everything it carries: `group` is the group id of group events (else
 * NULL), `info` every key of the event's info (the notifier's, and the group keys:
 * "pmix.grp.id", "pmix.grp.ldr", "pmix.grp.mbrs", "pmix.grp.ctxid", …). */
typedef struct {
    int code;
    cohort_proc_t source;
    const cohort_proc_t *affected;
    size_t naffected;
    const char *group;
    const cohort_info_t *info;
    size_t ninfo;
} cohort_event_t;
/* A handler given the whole event, which lives only during the call. */
typedef void (*cohort_event_cb)(const cohort_event_t *event, void *cbdata);

/* Connects to the node server `cohort run` started this process under. */
int cohort_init(cohort_client_t **client);
/* Tells the node server this process is done and releases `client`. */
int cohort_finalize(cohort_client_t *client);

uint32_t cohort_rank(const cohort_client_t *client);
uint32_t cohort_size(const cohort_client_t *client);
/* This process's namespace; valid until cohort_finalize. */
const char *cohort_nspace(const cohort_client_t *client);

/* The calling thread's last error message ("" if none); valid until its next call. */
const char *cohort_last_error(void);
/* A fixed name for a status code ("COHORT_ERR_TIMEOUT", …). */
const char *cohort_status_name(int status);

int cohort_put_string(cohort_client_t *client, int scope, const char *key, const char *value);
int cohort_put_u64(cohort_client_t *client, int scope, const char *key, uint64_t value);
int cohort_put_bytes(cohort_client_t *client, int scope, const char *key, const void *data,
                     size_t len);
int cohort_commit(cohort_client_t *client);
/* Reads `key` of `proc` (`{group, group-rank}` allowed); timeout_ms <= 0: none. */
int cohort_get(cohort_client_t *client, const cohort_proc_t *proc, const char *key,
               int timeout_ms, cohort_value_t *value);
void cohort_value_free(cohort_value_t *value);

/* Fence over `procs` (none: the whole job; `{group, COHORT_RANK_WILDCARD}`: a group). */
int cohort_fence(cohort_client_t *client, const cohort_proc_t *procs, size_t nprocs,
                 int collect, int timeout_ms);
/* The same with PMIX_GROUP_FT_COLLECTIVE: participants that terminated before taking
 * part are excused, when every caller asks (else COHORT_ERR_PROC_TERMINATED). */
int cohort_fence_ft(cohort_client_t *client, const cohort_proc_t *procs, size_t nprocs,
                    int collect, int timeout_ms);

int cohort_group_construct(cohort_client_t *client, const char *id, const cohort_proc_t *procs,
                           size_t nprocs, const cohort_construct_opts_t *opts,
                           cohort_group_t *group);
void cohort_group_free(cohort_group_t *group);
/* Invite/join method: the leader invites `procs` and returns when every invitee has
 * answered; invitees get COHORT_EVENT_GROUP_INVITED (source: the leader; group: the
 * id) and answer with cohort_group_join, or from inside the handler with
 * cohort_group_join_nb, passing their group info (PMIX_GROUP_INFO; NULL, 0: none). A
 * declining join leaves `group` untouched (it may be NULL). */
int cohort_group_invite(cohort_client_t *client, const char *id, const cohort_proc_t *procs,
                        size_t nprocs, const cohort_invite_opts_t *opts, cohort_group_t *group);
int cohort_group_join(cohort_client_t *client, const char *id, const cohort_proc_t *leader,
                      int accept, const cohort_info_t *info, size_t ninfo, int timeout_ms,
                      cohort_group_t *group);
/* Membership and context id of a group known to this process's node server. */
int cohort_group_query(cohort_client_t *client, const char *id, cohort_group_t *group);
int cohort_group_destruct(cohort_client_t *client, const char *id, int timeout_ms);
/* Destruct with PMIX_GROUP_FT_COLLECTIVE: members that terminated are excused when every
 * caller asks. (A construct drops them with `optional`.) */
int cohort_group_destruct_ft(cohort_client_t *client, const char *id, int timeout_ms);
int cohort_group_leave(cohort_client_t *client, const char *id);

/* Failure views (spec/mpi3-ft-validate-local-global.txt): local, and agreed by all
 * surviving members (a collective). */
int cohort_group_failed_local(cohort_client_t *client, const char *id, cohort_failed_t *out);
int cohort_group_failed_global(cohort_client_t *client, const char *id, int timeout_ms,
                               cohort_failed_t *out);
void cohort_failed_free(cohort_failed_t *failed);

/* Calls `fn` on the client's event thread for events whose code is in `codes`
 * (ncodes 0: every code); `*id` identifies the handler. */
int cohort_register_event_handler(cohort_client_t *client, const int *codes, size_t ncodes,
                                  cohort_event_fn fn, void *cbdata, uint64_t *id);
/* The same, the handler getting the whole event (its info too). */
int cohort_register_event_callback(cohort_client_t *client, const int *codes, size_t ncodes,
                                   cohort_event_cb cb, void *cbdata, uint64_t *id);
int cohort_deregister_event_handler(cohort_client_t *client, uint64_t id);
/* Process sets of the session (`cohort run --pset`, and those of the spawned jobs
 * running): their names (PMIX_QUERY_PSET_NAMES) and members
 * (PMIX_QUERY_PSET_MEMBERSHIP), and a process's
 * application context (PMIX_APPNUM). Release lists with cohort_strings_free and
 * cohort_procs_free. */
int cohort_pset_names(cohort_client_t *client, char ***names, size_t *n);
/* The namespaces of the session's running jobs, the launched one first
 * (PMIX_QUERY_NAMESPACES); release with cohort_strings_free. */
int cohort_namespaces(cohort_client_t *client, char ***names, size_t *n);
int cohort_pset_members(cohort_client_t *client, const char *name, cohort_proc_t **procs,
                        size_t *n);
int cohort_appnum(cohort_client_t *client, const cohort_proc_t *proc, uint32_t *appnum);
void cohort_strings_free(char **strs, size_t n);
void cohort_procs_free(cohort_proc_t *procs, size_t n);

/* PMIx_Connect / PMIx_Disconnect (rfc0003): a collective over `procs`; the connected
 * processes get the same new `nspace` (COHORT_MAX_NSLEN + 1 bytes; "" with xchg_only),
 * addressable like a group id, and `rank` (their index in it; UINT32_MAX with
 * xchg_only). Disconnect is collective among them. */
int cohort_connect(cohort_client_t *client, const cohort_proc_t *procs, size_t nprocs,
                   const cohort_connect_opts_t *opts, char *nspace, uint32_t *rank);
int cohort_disconnect(cohort_client_t *client, const char *nspace, int timeout_ms);

/* Raises event `code` to `range` (never delivered back to the caller), carrying
 * `info` (NULL, 0: none). */
int cohort_notify(cohort_client_t *client, int code, int range, const char *target,
                  const cohort_proc_t *procs, size_t nprocs, const cohort_info_t *info,
                  size_t ninfo);

/* Publish / lookup (PMIx_Publish, PMIx_Lookup, PMIx_Unpublish) on the job's data
 * store: `data` (ndata entries) is published under its keys, all or nothing
 * (COHORT_ERR_KEY_PUBLISHED when a key is already published in that range; opts NULL:
 * defaults). A lookup returns only what it found (`*nfound` may be 0; release the list
 * with cohort_published_free). Unpublish removes this process's values under `keys`
 * (NULL, 0: all of them) in opts' range. */
int cohort_publish(cohort_client_t *client, const cohort_info_t *data, size_t ndata,
                   const cohort_publish_opts_t *opts);
int cohort_lookup(cohort_client_t *client, const char *const *keys, size_t nkeys,
                  const cohort_lookup_opts_t *opts, cohort_published_t **found,
                  size_t *nfound);
void cohort_published_free(cohort_published_t *found, size_t nfound);
int cohort_unpublish(cohort_client_t *client, const char *const *keys, size_t nkeys,
                     const cohort_publish_opts_t *opts);

/* Spawn (PMIx_Spawn): starts `apps` (napps of them) as a new job of the session, in a
 * namespace of its own ("<this job's namespace>@<k>", written to `nspace`,
 * COHORT_MAX_NSLEN + 1 bytes, when not NULL); returns once every node server knows it
 * and its processes are started. Its processes find the spawning process with
 * cohort_parent, which answers COHORT_ERR_NOT_FOUND in a job `cohort run` launched.
 * The two jobs reach each other by their namespaces (cohort_get, cohort_connect over
 * both jobs' wildcards, a group construct). */
int cohort_spawn(cohort_client_t *client, const cohort_spawn_app_t *apps, size_t napps,
                 const cohort_spawn_opts_t *opts, char *nspace);
int cohort_parent(cohort_client_t *client, cohort_proc_t *parent);

/* Non-blocking forms (PMIx's _nb): the request starts at once; a non-zero return
 * means it did not start and `cb` will not be called. */
int cohort_fence_nb(cohort_client_t *client, const cohort_proc_t *procs, size_t nprocs,
                    int collect, int timeout_ms, cohort_op_cb cb, void *cbdata);
int cohort_get_nb(cohort_client_t *client, const cohort_proc_t *proc, const char *key,
                  int timeout_ms, cohort_value_cb cb, void *cbdata);
int cohort_group_construct_nb(cohort_client_t *client, const char *id,
                              const cohort_proc_t *procs, size_t nprocs,
                              const cohort_construct_opts_t *opts, cohort_group_cb cb,
                              void *cbdata);
int cohort_group_invite_nb(cohort_client_t *client, const char *id,
                           const cohort_proc_t *procs, size_t nprocs,
                           const cohort_invite_opts_t *opts, cohort_group_cb cb, void *cbdata);
int cohort_group_join_nb(cohort_client_t *client, const char *id, const cohort_proc_t *leader,
                         int accept, const cohort_info_t *info, size_t ninfo, int timeout_ms,
                         cohort_group_cb cb, void *cbdata);
int cohort_group_destruct_nb(cohort_client_t *client, const char *id, int timeout_ms,
                             cohort_op_cb cb, void *cbdata);
int cohort_group_leave_nb(cohort_client_t *client, const char *id, cohort_op_cb cb,
                          void *cbdata);
int cohort_group_failed_global_nb(cohort_client_t *client, const char *id, int timeout_ms,
                                  cohort_failed_cb cb, void *cbdata);
int cohort_connect_nb(cohort_client_t *client, const cohort_proc_t *procs, size_t nprocs,
                      const cohort_connect_opts_t *opts, cohort_connect_cb cb, void *cbdata);
int cohort_disconnect_nb(cohort_client_t *client, const char *nspace, int timeout_ms,
                         cohort_op_cb cb, void *cbdata);
int cohort_publish_nb(cohort_client_t *client, const cohort_info_t *data, size_t ndata,
                      const cohort_publish_opts_t *opts, cohort_op_cb cb, void *cbdata);
/* `found` lives until `cb` returns. */
int cohort_lookup_nb(cohort_client_t *client, const char *const *keys, size_t nkeys,
                     const cohort_lookup_opts_t *opts, cohort_lookup_cb cb, void *cbdata);
int cohort_unpublish_nb(cohort_client_t *client, const char *const *keys, size_t nkeys,
                        const cohort_publish_opts_t *opts, cohort_op_cb cb, void *cbdata);
/* `nspace` ("" on failure) lives until `cb` returns. */
int cohort_spawn_nb(cohort_client_t *client, const cohort_spawn_app_t *apps, size_t napps,
                    const cohort_spawn_opts_t *opts, cohort_spawn_cb cb, void *cbdata);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_H */
