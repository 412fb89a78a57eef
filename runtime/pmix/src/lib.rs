//! A PMIx v4 client library (`libpmix.so.2`) on the cohort client: programs and MPI
//! libraries written against OpenPMIx's `pmix.h` run unmodified under `cohort run` by
//! loading this library in place of OpenPMIx's.
//!
//! * Every blocking call wraps the blocking form of the [`cohort::Client`] call; every
//!   `_nb` call starts the async form now and runs its callback on this library's
//!   completion thread (never inside the call itself).
//! * Job-level keys (`PMIX_JOB_SIZE`, `PMIX_LOCAL_RANK`, …) come from the job map the
//!   node server sent at init (`keys.rs`); everything else from cohort's put/get.
//!   Values keep their PMIx type through cohort (`value.rs`).
//! * Memory handed to C is `malloc`'d, so the header's `PMIX_*_FREE` macros release it.
//! * Nothing panics across the boundary: every entry point runs under `catch_unwind`
//!   and answers `PMIX_ERROR` if something did; NULL or malformed arguments give
//!   `PMIX_ERR_BAD_PARAM`.
//! * `PMIx_Spawn` starts a new job of the session (`spawn.rs`); its processes read
//!   `PMIX_PARENT_ID` (a `PMIX_PROC`) and `PMIX_SPAWNED` (a bool), and everyone reads
//!   the job-level keys of every namespace of the session from its node server.
//! * Calls this library does not implement (allocation, credentials, fabric, the
//!   server and tool APIs, …) are exported and return `PMIX_ERR_NOT_SUPPORTED` (`stubs.rs`), so that
//!   Open MPI's `ext3x` component, which links all of them, loads.

mod control;
mod events;
mod groups;
mod infolist;
mod keys;
mod locality;
mod publish;
mod spawn;
pub mod stubs;
pub mod types;
pub mod value;

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use cohort::{Client, CohortError, FenceOpts, HandlerId, ProcId, Scope};

use types::*;
use value::{PVal, *};

/// What `PMIx_Get_version` returns. Open MPI's ext3x component only requires the first
/// character to sort at or above `'3'`.
static VERSION: &[u8] = concat!(
    "cohort ",
    env!("CARGO_PKG_VERSION"),
    " (PMIx 4.2 client API)\0"
)
.as_bytes();

/// The library's state between `PMIx_Init` and the last `PMIx_Finalize`.
pub(crate) struct State {
    pub client: Client,
    /// Data stored with `PMIx_Store_internal` or put with `PMIX_INTERNAL` scope:
    /// looked up first by `PMIx_Get`, never sent anywhere.
    pub store: Mutex<HashMap<(ProcId, String), PVal>>,
    /// PMIx handler references → cohort handler ids.
    pub handlers: Mutex<HashMap<usize, HandlerId>>,
    pub next_handler: AtomicUsize,
    /// Connections made by `PMIx_Connect`: the processes named, and the connection's
    /// nspace (none when the connect was a fence within this job).
    pub connections: Mutex<Vec<(Vec<ProcId>, Option<String>)>>,
    /// Paths registered with `PMIx_Job_control` for cleanup, removed at finalize.
    pub cleanup: Mutex<Vec<control::Cleanup>>,
}

/// The state, and how many `PMIx_Init`s it still answers.
static STATE: Mutex<Option<(Arc<State>, usize)>> = Mutex::new(None);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The initialized state, or `PMIX_ERR_INIT`.
pub(crate) fn state() -> Result<Arc<State>, pmix_status_t> {
    lock(&STATE)
        .as_ref()
        .map(|(s, _)| Arc::clone(s))
        .ok_or(PMIX_ERR_INIT)
}

/// Runs an entry point: its error, or `PMIX_ERROR` if it panicked.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), pmix_status_t>) -> pmix_status_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => PMIX_SUCCESS,
        Ok(Err(s)) => s,
        Err(_) => PMIX_ERROR,
    }
}

/// Prints `what()` on stderr when `COHORT_PMIX_DEBUG` is set.
pub(crate) fn debug(what: impl FnOnce() -> String) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("COHORT_PMIX_DEBUG").is_some()) {
        // Not eprintln!, which panics when stderr is gone.
        let line = format!("cohort-pmix[{}]: {}\n", std::process::id(), what());
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
}

/// The PMIx status for a cohort error.
pub(crate) fn status_of(e: &CohortError) -> pmix_status_t {
    use CohortError::*;
    debug(|| e.to_string());
    match e {
        Timeout { .. } => PMIX_ERR_TIMEOUT,
        NotFound { .. } | UnknownProc { .. } | GroupNotFound { .. } | PsetNotFound { .. } => {
            PMIX_ERR_NOT_FOUND
        }
        InvalidGroupId { .. }
        | BadRequest(_)
        | NotAMember { .. }
        | Mismatch { .. }
        | LeaderMismatch { .. }
        | LeaderCountMismatch { .. } => PMIX_ERR_BAD_PARAM,
        GroupIdInUse { .. } => PMIX_ERR_EXISTS,
        KeyPublished { .. } => PMIX_ERR_DUPLICATE_KEY,
        NotLeader { .. } | AuthRefused(_) => PMIX_ERR_NO_PERMISSIONS,
        ProcTerminated { .. } => PMIX_PROC_TERMINATED,
        PeerLost { .. } => PMIX_ERR_UNREACH,
        ServerLost(_) => PMIX_ERR_LOST_CONNECTION,
        ConstructAborted { .. } => PMIX_GROUP_CONSTRUCT_ABORT,
        NotSupported(_) => PMIX_ERR_NOT_SUPPORTED,
        #[allow(unreachable_patterns)]
        _ => PMIX_ERROR,
    }
}

// ------------------------------------------------------------------ completion thread

/// The thread that drives the non-blocking calls and runs their callbacks.
fn completions() -> Option<&'static tokio::runtime::Handle> {
    static RT: OnceLock<Option<tokio::runtime::Handle>> = OnceLock::new();
    RT.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        let handle = rt.handle().clone();
        std::thread::Builder::new()
            .name("pmix-completions".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .ok()?;
        Some(handle)
    })
    .as_ref()
}

/// C callback data, carried to the completion or event thread.
#[derive(Clone, Copy)]
pub(crate) struct CbData(pub *mut c_void);
// SAFETY: the caller of a non-blocking call hands `cbdata` over to the thread that runs
// its callback; PMIx documents that callbacks run on the library's own threads.
unsafe impl Send for CbData {}
// SAFETY: as for Send; the pointer is only passed back to C, never dereferenced here.
unsafe impl Sync for CbData {}

/// Runs `fut` on the completion thread, then `done` with its outcome there (a panic
/// in either is contained).
pub(crate) fn complete<T: Send + 'static>(
    fut: impl Future<Output = T> + Send + 'static,
    done: impl FnOnce(T) + Send + 'static,
) -> Result<(), pmix_status_t> {
    let rt = completions().ok_or(PMIX_ERR_OUT_OF_RESOURCE)?;
    rt.spawn(async move {
        let out = fut.await;
        let _ = catch_unwind(AssertUnwindSafe(|| done(out)));
    });
    Ok(())
}

/// Calls an op callback with `status` on the completion thread.
pub(crate) fn op_callback(
    cb: pmix_op_cbfunc_t,
    data: CbData,
    fut: impl Future<Output = pmix_status_t> + Send + 'static,
) -> Result<(), pmix_status_t> {
    complete(fut, move |status| {
        if let Some(cb) = cb {
            let data = data;
            // SAFETY: the caller gave `cb` for this completion, with `cbdata`.
            unsafe { cb(status, data.0) };
        }
    })
}

/// The PMIx status `fut` ends with.
pub(crate) async fn status_after(
    fut: impl Future<Output = Result<(), CohortError>>,
) -> pmix_status_t {
    fut.await.err().map_or(PMIX_SUCCESS, |e| status_of(&e))
}

// ------------------------------------------------------------------ argument helpers

/// The processes of a C array (`NULL` with 0 is empty).
///
/// # Safety
/// `procs` is NULL or points to `n` processes.
pub(crate) unsafe fn procs_in(
    procs: *const pmix_proc_t,
    n: usize,
) -> Result<Vec<ProcId>, pmix_status_t> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if procs.is_null() {
        return Err(PMIX_ERR_BAD_PARAM);
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(procs, n) }
        .iter()
        .map(proc_in)
        .collect()
}

/// # Safety
/// `info` is NULL or points to `n` valid infos.
pub(crate) unsafe fn infos(info: *const pmix_info_t, n: usize) -> Vec<(String, PVal)> {
    // SAFETY: forwarded contract.
    unsafe { read_infos(info, n) }
}

pub(crate) fn find<'a>(info: &'a [(String, PVal)], key: &str) -> Option<&'a PVal> {
    info.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
}

pub(crate) fn flag(info: &[(String, PVal)], key: &str) -> bool {
    find(info, key).is_some_and(PVal::truthy)
}

/// PMIX_TIMEOUT (seconds; 0 or absent: none).
pub(crate) fn timeout(info: &[(String, PVal)]) -> Option<Duration> {
    find(info, PMIX_TIMEOUT)
        .and_then(PVal::as_u64)
        .filter(|&s| s > 0)
        .map(Duration::from_secs)
}

/// # Safety
/// `s` is NULL or NUL-terminated.
pub(crate) unsafe fn text(s: *const c_char) -> Result<String, pmix_status_t> {
    // SAFETY: forwarded contract.
    unsafe { c_str(s) }.ok_or(PMIX_ERR_BAD_PARAM)
}

/// Expands `{own nspace, wildcard}` to the job's ranks (cohort's constructs and
/// connects name processes one by one).
pub(crate) fn expand(c: &Client, procs: Vec<ProcId>) -> Vec<ProcId> {
    let mut out = Vec::with_capacity(procs.len());
    for p in procs {
        if p.is_wildcard() && p.nspace == c.nspace() {
            out.extend((0..c.size()).map(|r| ProcId::new(c.nspace(), r)));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out.dedup();
    out
}

// ------------------------------------------------------------------ init and finalize

/// Connects to the node server `cohort run` started this process under (its
/// `COHORT_*` environment) and fills `proc` with this process's id. Later calls only
/// count: each needs a `PMIx_Finalize`.
///
/// # Safety
/// `proc` is NULL or writable; `info` is NULL or points to `ninfo` infos.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Init(
    proc_: *mut pmix_proc_t,
    _info: *mut pmix_info_t,
    _ninfo: usize,
) -> pmix_status_t {
    guard(|| {
        let mut st = lock(&STATE);
        let state = match st.as_mut() {
            Some((s, count)) => {
                *count += 1;
                Arc::clone(s)
            }
            None => {
                let client = Client::init().map_err(|e| {
                    let line = format!("PMIx_Init (cohort): {e}\n");
                    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                    PMIX_ERR_INIT
                })?;
                let s = Arc::new(State {
                    client,
                    store: Mutex::new(HashMap::new()),
                    handlers: Mutex::new(HashMap::new()),
                    next_handler: AtomicUsize::new(1),
                    connections: Mutex::new(Vec::new()),
                    cleanup: Mutex::new(Vec::new()),
                });
                *st = Some((Arc::clone(&s), 1));
                s
            }
        };
        drop(st);
        // SAFETY: NULL checked; writable per the contract.
        if let Some(p) = unsafe { proc_.as_mut() } {
            *p = proc_out(state.client.proc_id());
        }
        Ok(())
    })
}

/// Ends one `PMIx_Init`; the last tells the node server this process is done. With
/// PMIX_EMBED_BARRIER, the last first fences with the rest of its job (no data): it
/// returns once every process of the job reached that fence (in its own finalize),
/// and finalizes even if the fence fails, returning the fence's error then.
///
/// # Safety
/// `info` is NULL or points to `ninfo` infos.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Finalize(info: *const pmix_info_t, ninfo: usize) -> pmix_status_t {
    // SAFETY: per the contract.
    let barrier = flag(&unsafe { infos(info, ninfo) }, PMIX_EMBED_BARRIER);
    guard(|| {
        let mut st = lock(&STATE);
        let Some((state, count)) = st.as_mut() else {
            return Err(PMIX_ERR_INIT);
        };
        let mut fenced = Ok(());
        if barrier && *count == 1 {
            // Not under the lock: event handlers may call the library meanwhile.
            let client = state.client.clone();
            drop(st);
            fenced = client
                .fence(&[], FenceOpts::default())
                .map_err(|e| status_of(&e));
            st = lock(&STATE);
        }
        let Some((_, count)) = st.as_mut() else {
            return Err(PMIX_ERR_INIT);
        };
        *count -= 1;
        if *count > 0 {
            return fenced;
        }
        let (state, _) = st.take().ok_or(PMIX_ERR_INIT)?;
        drop(st);
        control::clean_up(&state);
        let client = state.client.clone();
        for (_, id) in lock(&state.handlers).drain() {
            client.deregister_event_handler(id);
        }
        drop(state);
        let done = client.finalize().map_err(|e| status_of(&e));
        fenced.and(done)
    })
}

/// 1 between `PMIx_Init` and the last `PMIx_Finalize`, else 0.
#[no_mangle]
pub extern "C" fn PMIx_Initialized() -> c_int {
    catch_unwind(|| lock(&STATE).is_some() as c_int).unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn PMIx_Get_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

/// Prints `msg` and ends this process with `status` (1 if 0): cohort's node server
/// sees a rank exit abnormally and `cohort run` ends the job. Only the whole job can
/// be aborted: naming other processes is not supported.
///
/// # Safety
/// `msg` is NULL or NUL-terminated; `procs` NULL or `nprocs` processes.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Abort(
    status: c_int,
    msg: *const c_char,
    _procs: *mut pmix_proc_t,
    _nprocs: usize,
) -> pmix_status_t {
    let _ = catch_unwind(|| {
        // SAFETY: NULL or NUL-terminated per the contract.
        let msg = unsafe { c_str(msg) }.unwrap_or_default();
        let who = state()
            .map(|s| s.client.proc_id().to_string())
            .unwrap_or_default();
        let line = format!("PMIx_Abort by {who} (status {status}): {msg}\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    });
    std::process::exit(if status == 0 { 1 } else { status })
}

// ------------------------------------------------------------------ put, commit, get

/// Posts `key` = `val` with `scope` (`PMIX_INTERNAL`: kept in this process only).
///
/// # Safety
/// `key` is NULL or NUL-terminated; `val` NULL or a valid value.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Put(
    scope: pmix_scope_t,
    key: *const c_char,
    val: *mut pmix_value_t,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: per the contract.
        let key = unsafe { text(key) }?;
        // SAFETY: NULL checked; valid per the contract.
        let v = unsafe { read_value(val.as_ref().ok_or(PMIX_ERR_BAD_PARAM)?) }?;
        let scope = match u32::from(scope) {
            PMIX_LOCAL => Scope::Local,
            PMIX_REMOTE => Scope::Remote,
            PMIX_GLOBAL | PMIX_SCOPE_UNDEF => Scope::Global,
            PMIX_INTERNAL => {
                lock(&s.store).insert((s.client.proc_id().clone(), key), v);
                return Ok(());
            }
            _ => return Err(PMIX_ERR_BAD_PARAM),
        };
        s.client
            .put(scope, &key, to_cohort(&v))
            .map_err(|e| status_of(&e))
    })
}

#[no_mangle]
pub extern "C" fn PMIx_Commit() -> pmix_status_t {
    guard(|| {
        let s = state()?;
        s.client.commit().map_err(|e| status_of(&e))
    })
}

/// Keeps `key` = `val` for `proc` in this process only (found by `PMIx_Get` first).
///
/// # Safety
/// `proc` NULL or a process; `key` NUL-terminated; `val` a valid value.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Store_internal(
    proc_: *const pmix_proc_t,
    key: *const c_char,
    val: *mut pmix_value_t,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: per the contract.
        let key = unsafe { text(key) }?;
        // SAFETY: NULL checked; valid per the contract.
        let v = unsafe { read_value(val.as_ref().ok_or(PMIX_ERR_BAD_PARAM)?) }?;
        // SAFETY: NULL or a process per the contract.
        let p = match unsafe { proc_.as_ref() } {
            Some(p) => proc_in(p)?,
            None => s.client.proc_id().clone(),
        };
        lock(&s.store).insert((p, key), v);
        Ok(())
    })
}

/// How a get goes: answered here, or a request to the node server.
enum GetPlan {
    Here(Result<PVal, pmix_status_t>),
    Server {
        proc: ProcId,
        key: String,
        timeout: Option<Duration>,
    },
}

/// How long a get marked PMIX_OPTIONAL or PMIX_IMMEDIATE waits for data that was not
/// posted yet (PMIx looks only in the local cache then; cohort's cache is its node
/// server, which answers at once for data committed and not-found for data its owner
/// committed without that key).
const IMMEDIATE_WAIT: Duration = Duration::from_millis(500);

/// The job-level keys the node server answers for the processes of every job of the
/// session (this process's own job's come from its job map, `keys.rs`).
const FOREIGN_JOB_KEYS: &[&str] = &[
    PMIX_JOB_SIZE,
    PMIX_UNIV_SIZE,
    PMIX_NUM_NODES,
    PMIX_NSPACE,
    PMIX_JOB_NUM_APPS,
    PMIX_RANK,
    PMIX_NODEID,
    PMIX_HOSTNAME,
    PMIX_LOCAL_RANK,
    PMIX_LOCAL_SIZE,
    PMIX_LOCAL_PEERS,
    PMIX_APPNUM,
    PMIX_APP_SIZE,
    PMIX_APP_RANK,
    PMIX_PSET_NAMES,
    PMIX_LOCALITY_STRING,
    PMIX_CPUSET,
];

/// # Safety
/// As `PMIx_Get`.
unsafe fn get_plan(
    s: &State,
    proc_: *const pmix_proc_t,
    key: *const c_char,
    info: *const pmix_info_t,
    ninfo: usize,
) -> Result<GetPlan, pmix_status_t> {
    // SAFETY: per the contract.
    let key = unsafe { text(key) }?;
    // SAFETY: NULL or a process per the contract.
    let p = match unsafe { proc_.as_ref() } {
        Some(p) => proc_in(p)?,
        None => s.client.proc_id().clone(),
    };
    // SAFETY: per the contract.
    let info = unsafe { infos(info, ninfo) };
    if let Some(v) = lock(&s.store).get(&(p.clone(), key.clone())) {
        return Ok(GetPlan::Here(Ok(v.clone())));
    }
    // Job-level keys the node server answers for every namespace of the session, at
    // once.
    // PMIX_NODE_RANK and PMIX_NODE_SIZE count every job's processes on the node, which
    // this process's job map alone does not know.
    let server_side = match key.as_str() {
        PMIX_PARENT_ID => Some(cohort::keys::PARENT_ID),
        PMIX_SPAWNED => Some(cohort::keys::SPAWNED),
        PMIX_NODE_RANK => Some(cohort::keys::NODE_RANK),
        PMIX_NODE_SIZE => Some(cohort::keys::NODE_SIZE),
        // This host's topology (Open MPI asks with PMIX_IMMEDIATE and loads it instead
        // of discovering the host).
        cohort::keys::HWLOC_XML => Some(cohort::keys::HWLOC_XML),
        _ => None,
    };
    if let Some(k) = server_side {
        return Ok(GetPlan::Server {
            proc: p,
            key: k.to_string(),
            timeout: timeout(&info),
        });
    }
    if let Some(v) = keys::job_value(&s.client, &p, &key) {
        return Ok(GetPlan::Here(Ok(v)));
    }
    let quick = flag(&info, PMIX_OPTIONAL) || flag(&info, PMIX_IMMEDIATE);
    // The node server answers another job's job-level keys at once, even when asked
    // to look locally only.
    let foreign_job_key = p.nspace != s.client.nspace() && FOREIGN_JOB_KEYS.contains(&key.as_str());
    // Reserved keys nobody posted, and anything asked of a wildcard, are not found.
    if p.is_wildcard() && p.nspace == s.client.nspace()
        || (quick && key.starts_with("pmix.") && !foreign_job_key)
    {
        return Ok(GetPlan::Here(Err(PMIX_ERR_NOT_FOUND)));
    }
    let timeout = match timeout(&info) {
        Some(t) => Some(t),
        None if quick => Some(IMMEDIATE_WAIT),
        None => None,
    };
    Ok(GetPlan::Server {
        proc: p,
        key,
        timeout,
    })
}

fn get_status(e: CohortError) -> pmix_status_t {
    match status_of(&e) {
        // A get that timed out found nothing.
        PMIX_ERR_TIMEOUT => PMIX_ERR_NOT_FOUND,
        s => s,
    }
}

/// Reads `key` of `proc` (NULL: this process) into a new value the
/// caller releases with PMIX_VALUE_RELEASE. Job-level keys are answered locally; data
/// posted by others waits (up to PMIX_TIMEOUT seconds) until it is committed.
///
/// # Safety
/// `proc` NULL or a process; `key` NUL-terminated; `info` NULL or `ninfo` infos;
/// `val` writable.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Get(
    proc_: *const pmix_proc_t,
    key: *const c_char,
    info: *const pmix_info_t,
    ninfo: usize,
    val: *mut *mut pmix_value_t,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        if val.is_null() {
            return Err(PMIX_ERR_BAD_PARAM);
        }
        // SAFETY: forwarded contract.
        let plan = unsafe { get_plan(&s, proc_, key, info, ninfo) };
        let v = match plan {
            Ok(GetPlan::Here(r)) => r,
            Ok(GetPlan::Server { proc, key, timeout }) => s
                .client
                .get(&proc, &key, timeout)
                .map(|v| from_cohort(&v))
                .map_err(get_status),
            Err(e) => Err(e),
        };
        debug(|| {
            let shown = match &v {
                Ok(PVal::Bytes(b)) => format!("{} bytes", b.len()),
                other => format!("{other:?}"),
            };
            format!("PMIx_Get {:?} -> {shown}", key_of(key))
        });
        let v = v?;
        // SAFETY: `val` is writable per the contract.
        unsafe { val.write(value_out(&key_of(key), &v)) };
        Ok(())
    })
}

/// The key text for typing fix-ups (NULL keys were refused before).
fn key_of(key: *const c_char) -> String {
    // SAFETY: callers pass the key they validated.
    unsafe { c_str(key) }.unwrap_or_default()
}

/// A new `malloc`'d value holding `v` (with the type the header gives `key`).
pub(crate) fn value_out(key: &str, v: &PVal) -> *mut pmix_value_t {
    let v = typed_for_key(key, v.clone());
    let out = calloc::<pmix_value_t>(1);
    if let Some(o) = unsafe_mut(out) {
        // SAFETY: `o` is a zeroed value of our own.
        unsafe { write_value(&v, o) };
    }
    out
}

fn unsafe_mut<'a, T>(p: *mut T) -> Option<&'a mut T> {
    // SAFETY: callers pass NULL or a fresh allocation they own.
    unsafe { p.as_mut() }
}

/// Values cohort carries with another type than the header gives their key.
pub(crate) fn typed_for_key(key: &str, v: PVal) -> PVal {
    match (key, v) {
        (PMIX_GROUP_CONTEXT_ID, PVal::Uint64(x)) => PVal::Size(x),
        // cohort names a group event's leader and a job's parent as a one-process
        // list.
        (
            PMIX_EVENT_AFFECTED_PROC | PMIX_GROUP_LEADER | PMIX_PARENT_ID,
            PVal::Array(PMIX_PROC, mut p),
        ) if p.len() == 1 => p.pop().unwrap_or(PVal::Bool(false)),
        // A spawned job's end (PMIX_EVENT_JOB_END): an int and a pmix_status_t.
        (PMIX_EXIT_CODE, PVal::Int64(x)) => PVal::Int(i32::try_from(x).unwrap_or(i32::MAX)),
        (PMIX_JOB_TERM_STATUS, PVal::Int64(x)) => {
            PVal::Status(i32::try_from(x).unwrap_or(PMIX_ERROR))
        }
        // The node server answers another namespace's ranks as plain integers.
        (PMIX_LOCAL_RANK | PMIX_NODE_RANK, PVal::Uint32(x)) => {
            PVal::Uint16(u16::try_from(x).unwrap_or(u16::MAX))
        }
        (
            PMIX_RANK | PMIX_GLOBAL_RANK | PMIX_APP_RANK | PMIX_LOCALLDR | PMIX_APPLDR,
            PVal::Uint32(x),
        ) => PVal::Rank(x),
        (_, v) => v,
    }
}

/// As `PMIx_Get`; `cbfunc` gets the status and a value valid during the call, on the
/// library's completion thread.
///
/// # Safety
/// As `PMIx_Get`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Get_nb(
    proc_: *const pmix_proc_t,
    key: *const c_char,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_value_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        let cb = cbfunc.ok_or(PMIX_ERR_BAD_PARAM)?;
        let k = key_of(key);
        // SAFETY: forwarded contract.
        let plan = unsafe { get_plan(&s, proc_, key, info, ninfo) }?;
        let fut: std::pin::Pin<Box<dyn Future<Output = Result<PVal, pmix_status_t>> + Send>> =
            match plan {
                GetPlan::Here(r) => Box::pin(std::future::ready(r)),
                GetPlan::Server { proc, key, timeout } => {
                    let f = s.client.get_async(&proc, &key, timeout);
                    Box::pin(async move { f.await.map(|v| from_cohort(&v)).map_err(get_status) })
                }
            };
        let data = CbData(cbdata);
        complete(fut, move |r| {
            let data = data;
            match r {
                Ok(v) => {
                    let out = value_out(&k, &v);
                    // SAFETY: the caller's callback, with a value valid during the call.
                    unsafe {
                        cb(PMIX_SUCCESS, out, data.0);
                        if let Some(o) = out.as_mut() {
                            destruct_value(o);
                        }
                        libc::free(out.cast());
                    }
                }
                // SAFETY: the caller's callback.
                Err(st) => unsafe { cb(st, std::ptr::null_mut(), data.0) },
            }
        })
    })
}

// ------------------------------------------------------------------ fence

/// # Safety
/// As `PMIx_Fence`.
unsafe fn fence_args(
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
) -> Result<(Vec<ProcId>, FenceOpts), pmix_status_t> {
    // SAFETY: forwarded contract.
    let procs = unsafe { procs_in(procs, nprocs) }?;
    // SAFETY: forwarded contract.
    let info = unsafe { infos(info, ninfo) };
    let opts = FenceOpts {
        collect: flag(&info, PMIX_COLLECT_DATA),
        timeout_ms: timeout(&info).map(|t| t.as_millis() as u64),
        ft_collective: flag(&info, PMIX_GROUP_FT_COLLECTIVE),
    };
    Ok((procs, opts))
}

/// Barrier over `procs` (NULL: this job; `{nspace, PMIX_RANK_WILDCARD}` allowed),
/// committing pending puts first. PMIX_COLLECT_DATA and PMIX_TIMEOUT are honoured.
///
/// # Safety
/// `procs` NULL or `nprocs` processes; `info` NULL or `ninfo` infos.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Fence(
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (procs, opts) = unsafe { fence_args(procs, nprocs, info, ninfo) }?;
        s.client.fence(&procs, opts).map_err(|e| status_of(&e))
    })
}

/// As `PMIx_Fence`; `cbfunc` gets the status on the library's completion thread.
///
/// # Safety
/// As `PMIx_Fence`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Fence_nb(
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (procs, opts) = unsafe { fence_args(procs, nprocs, info, ninfo) }?;
        let fut = s.client.fence_async(&procs, opts);
        op_callback(cbfunc, CbData(cbdata), status_after(fut))
    })
}

// ------------------------------------------------------------------ value helpers

/// Releases what `val` points to (strings, byte objects, arrays, …).
///
/// # Safety
/// `val` is NULL or a value whose memory came from `malloc`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Value_destruct(val: *mut pmix_value_t) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: NULL checked; valid per the contract.
        if let Some(v) = unsafe { val.as_mut() } {
            // SAFETY: a valid value whose memory came from malloc, per the contract.
            unsafe { destruct_value(v) };
        }
    }));
}

/// # Safety
/// `d` is NULL or a data array whose memory came from `malloc`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Data_array_destruct(d: *mut pmix_data_array_t) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: NULL checked; valid per the contract.
        if let Some(d) = unsafe { d.as_mut() } {
            // SAFETY: a valid array whose memory came from malloc, per the contract.
            unsafe { data_array_destruct(d) };
        }
    }));
}

/// Reads a value of type `ty` from what `data` points to, as PMIx_Value_load takes
/// it (a string is its `char*`; a process, byte object or data array a pointer to one;
/// scalars a pointer to the scalar).
///
/// # Safety
/// `data` is NULL or points to data of type `ty`.
unsafe fn load(data: *const c_void, ty: pmix_data_type_t) -> Result<PVal, pmix_status_t> {
    if data.is_null() {
        return match ty {
            PMIX_BOOL => Ok(PVal::Bool(true)),
            _ => Err(PMIX_ERR_BAD_PARAM),
        };
    }
    // SAFETY: `data` points to data of type `ty` per the contract; a string is passed
    // as the string itself, a process as a pointer to one.
    unsafe {
        match ty {
            PMIX_STRING => Ok(PVal::Str(c_str(data.cast()).unwrap_or_default())),
            PMIX_DATA_ARRAY => {
                let v = pmix_value_t {
                    type_: PMIX_DATA_ARRAY,
                    data: pmix_value_data {
                        darray: data as *mut pmix_data_array_t,
                    },
                };
                read_value(&v)
            }
            PMIX_PROC => Ok(PVal::Proc(proc_in(&*data.cast::<pmix_proc_t>())?)),
            _ => {
                let mut v = pmix_value_t {
                    type_: ty,
                    data: pmix_value_data { uint64: 0 },
                };
                let n = match ty {
                    PMIX_BYTE_OBJECT => std::mem::size_of::<pmix_byte_object_t>(),
                    PMIX_BOOL | PMIX_BYTE | PMIX_INT8 | PMIX_UINT8 | PMIX_PERSIST | PMIX_SCOPE
                    | PMIX_DATA_RANGE | PMIX_PROC_STATE => 1,
                    PMIX_INT16 | PMIX_UINT16 | PMIX_DATA_TYPE => 2,
                    PMIX_PID | PMIX_INT | PMIX_INT32 | PMIX_UINT | PMIX_UINT32 | PMIX_FLOAT
                    | PMIX_STATUS | PMIX_PROC_RANK | PMIX_INFO_DIRECTIVES => 4,
                    PMIX_SIZE | PMIX_INT64 | PMIX_UINT64 | PMIX_DOUBLE | PMIX_TIME => 8,
                    _ => return Err(PMIX_ERR_NOT_SUPPORTED),
                };
                std::ptr::copy_nonoverlapping(
                    data.cast::<u8>(),
                    std::ptr::addr_of_mut!(v.data).cast::<u8>(),
                    n,
                );
                read_value(&v)
            }
        }
    }
}

/// # Safety
/// `val` writable; `data` as [`load`].
#[no_mangle]
pub unsafe extern "C" fn PMIx_Value_load(
    val: *mut pmix_value_t,
    data: *const c_void,
    ty: pmix_data_type_t,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: NULL checked; writable per the contract.
        let out = unsafe { val.as_mut() }.ok_or(PMIX_ERR_BAD_PARAM)?;
        // SAFETY: forwarded contract.
        let v = unsafe { load(data, ty) }?;
        // SAFETY: `out` is writable.
        unsafe { write_value(&v, out) };
        Ok(())
    })
}

/// Loads `key` and a copy of the data into `info`.
///
/// # Safety
/// `info` writable; `key` NUL-terminated; `data` as [`load`].
#[no_mangle]
pub unsafe extern "C" fn PMIx_Info_load(
    info: *mut pmix_info_t,
    key: *const c_char,
    data: *const c_void,
    ty: pmix_data_type_t,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: NULL checked; writable per the contract.
        let out = unsafe { info.as_mut() }.ok_or(PMIX_ERR_BAD_PARAM)?;
        // SAFETY: per the contract.
        let key = unsafe { text(key) }?;
        key_out(&key, &mut out.key);
        // SAFETY: forwarded contract.
        let v = unsafe { load(data, ty) }?;
        // SAFETY: `out.value` is writable.
        unsafe { write_value(&v, &mut out.value) };
        Ok(())
    })
}

/// Copies `src` into `dest` (a deep copy).
///
/// # Safety
/// `dest` writable; `src` a valid value.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Value_xfer(
    dest: *mut pmix_value_t,
    src: *const pmix_value_t,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: NULL checked; per the contract.
        let (d, s) = unsafe { (dest.as_mut(), src.as_ref()) };
        let (d, s) = (d.ok_or(PMIX_ERR_BAD_PARAM)?, s.ok_or(PMIX_ERR_BAD_PARAM)?);
        if s.type_ == PMIX_UNDEF {
            d.type_ = PMIX_UNDEF;
            return Ok(());
        }
        // SAFETY: valid per the contract; `d` writable.
        unsafe {
            let v = read_value(s)?;
            write_value(&v, d);
        }
        Ok(())
    })
}

/// Copies `src` (key, flags and value) into `dest`.
///
/// # Safety
/// `dest` writable; `src` a valid info.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Info_xfer(
    dest: *mut pmix_info_t,
    src: *const pmix_info_t,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: NULL checked; per the contract.
        let (d, s) = unsafe { (dest.as_mut(), src.as_ref()) };
        let (d, s) = (d.ok_or(PMIX_ERR_BAD_PARAM)?, s.ok_or(PMIX_ERR_BAD_PARAM)?);
        d.key = s.key;
        d.flags = s.flags;
        // SAFETY: forwarded.
        let st = unsafe { PMIx_Value_xfer(&mut d.value, &s.value) };
        if st == PMIX_SUCCESS {
            Ok(())
        } else {
            Err(st)
        }
    })
}

/// The value's data as PMIx_Value_unload gives it: a new copy for strings, byte
/// objects (their bytes), processes and arrays; scalars into `*data`'s storage.
///
/// # Safety
/// `val` a valid value; `data` and `sz` writable; for scalars `*data` points to
/// storage for one.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Value_unload(
    val: *mut pmix_value_t,
    data: *mut *mut c_void,
    sz: *mut usize,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: NULL checked; per the contract.
        let (v, data, sz) = unsafe { (val.as_ref(), data.as_mut(), sz.as_mut()) };
        let (v, data, sz) = (
            v.ok_or(PMIX_ERR_BAD_PARAM)?,
            data.ok_or(PMIX_ERR_BAD_PARAM)?,
            sz.ok_or(PMIX_ERR_BAD_PARAM)?,
        );
        // SAFETY: valid per the contract.
        let pv = unsafe { read_value(v) }?;
        match &pv {
            PVal::Str(s) => {
                *data = strdup(s).cast();
                *sz = s.len() + 1;
            }
            PVal::Bytes(b) => {
                let p = calloc::<u8>(b.len());
                if !p.is_null() {
                    // SAFETY: `p` has b.len() bytes.
                    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), p, b.len()) };
                }
                *data = p.cast();
                *sz = b.len();
            }
            PVal::Proc(_) | PVal::Array(..) => {
                let mut tmp = pmix_value_t {
                    type_: PMIX_UNDEF,
                    data: pmix_value_data { uint64: 0 },
                };
                // SAFETY: `tmp` is ours; its pointer member moves to the caller.
                unsafe {
                    write_value(&pv, &mut tmp);
                    *data = tmp.data.ptr;
                }
                *sz = if matches!(pv, PVal::Proc(_)) {
                    std::mem::size_of::<pmix_proc_t>()
                } else {
                    std::mem::size_of::<pmix_data_array_t>()
                };
            }
            _ => {
                if data.is_null() {
                    return Err(PMIX_ERR_BAD_PARAM);
                }
                let mut tmp = pmix_value_t {
                    type_: PMIX_UNDEF,
                    data: pmix_value_data { uint64: 0 },
                };
                // SAFETY: scalar written into `tmp`, then its bytes into the caller's
                // storage for one scalar of that type.
                unsafe {
                    write_value(&pv, &mut tmp);
                    let n = scalar_size(pv.type_code());
                    std::ptr::copy_nonoverlapping(
                        std::ptr::addr_of!(tmp.data).cast::<u8>(),
                        (*data).cast::<u8>(),
                        n,
                    );
                    *sz = n;
                }
            }
        }
        Ok(())
    })
}

fn scalar_size(ty: pmix_data_type_t) -> usize {
    match ty {
        PMIX_BOOL | PMIX_BYTE | PMIX_INT8 | PMIX_UINT8 | PMIX_PERSIST | PMIX_SCOPE
        | PMIX_DATA_RANGE | PMIX_PROC_STATE => 1,
        PMIX_INT16 | PMIX_UINT16 | PMIX_DATA_TYPE => 2,
        PMIX_SIZE | PMIX_INT64 | PMIX_UINT64 | PMIX_DOUBLE => 8,
        _ => 4,
    }
}

/// Text of a status.
#[no_mangle]
pub extern "C" fn PMIx_Error_string(status: pmix_status_t) -> *const c_char {
    let name: &'static std::ffi::CStr = match status {
        PMIX_SUCCESS => c"SUCCESS",
        PMIX_ERROR => c"ERROR",
        PMIX_ERR_EXISTS => c"EXISTS",
        PMIX_ERR_TYPE_MISMATCH => c"TYPE MISMATCH",
        PMIX_ERR_NO_PERMISSIONS => c"NO-PERMISSIONS",
        PMIX_ERR_TIMEOUT => c"TIMEOUT",
        PMIX_ERR_UNREACH => c"UNREACHABLE",
        PMIX_ERR_BAD_PARAM => c"BAD-PARAM",
        PMIX_ERR_OUT_OF_RESOURCE => c"OUT-OF-RESOURCE",
        PMIX_ERR_INIT => c"INIT",
        PMIX_ERR_NOMEM => c"NO-MEMORY",
        PMIX_ERR_NOT_FOUND => c"NOT-FOUND",
        PMIX_ERR_NOT_SUPPORTED => c"NOT-SUPPORTED",
        PMIX_ERR_COMM_FAILURE => c"COMMUNICATION-FAILURE",
        PMIX_ERR_PARTIAL_SUCCESS => c"PARTIAL-SUCCESS",
        PMIX_ERR_DUPLICATE_KEY => c"DUPLICATE-KEY",
        PMIX_ERR_UNKNOWN_DATA_TYPE => c"UNKNOWN-DATA-TYPE",
        PMIX_ERR_LOST_CONNECTION => c"LOST-CONNECTION",
        PMIX_PROC_TERMINATED => c"PROC-TERMINATED",
        PMIX_GROUP_INVITED => c"GROUP-INVITED",
        PMIX_GROUP_LEFT => c"GROUP-LEFT",
        PMIX_GROUP_CONSTRUCT_ABORT => c"GROUP-CONSTRUCT-ABORT",
        PMIX_GROUP_CONSTRUCT_COMPLETE => c"GROUP-CONSTRUCT-COMPLETE",
        PMIX_GROUP_MEMBER_FAILED => c"GROUP-MEMBER-FAILED",
        PMIX_EVENT_PROC_TERMINATED => c"EVENT-PROC-TERMINATED",
        _ => c"UNKNOWN-STATUS",
    };
    name.as_ptr()
}

/// Name of a data type.
#[no_mangle]
pub extern "C" fn PMIx_Data_type_string(ty: pmix_data_type_t) -> *const c_char {
    catch_unwind(|| data_type_name(ty)).unwrap_or(c"UNKNOWN".as_ptr())
}

fn data_type_name(ty: pmix_data_type_t) -> *const c_char {
    DATA_TYPES
        .iter()
        .find(|(_, v)| *v == i64::from(ty))
        .map_or(c"UNKNOWN".as_ptr(), |(n, _)| {
            // The names live in a static list; hand out NUL-terminated copies made once.
            type_name(n)
        })
}

fn type_name(name: &'static str) -> *const c_char {
    static NAMES: OnceLock<Mutex<HashMap<&'static str, std::ffi::CString>>> = OnceLock::new();
    let mut names = lock(NAMES.get_or_init(Default::default));
    names
        .entry(name)
        .or_insert_with(|| std::ffi::CString::new(name).unwrap_or_default())
        .as_ptr()
}

#[no_mangle]
pub extern "C" fn PMIx_Scope_string(scope: pmix_scope_t) -> *const c_char {
    let s: &'static std::ffi::CStr = match u32::from(scope) {
        PMIX_SCOPE_UNDEF => c"UNDEFINED",
        PMIX_LOCAL => c"SHARE ON LOCAL NODE ONLY",
        PMIX_REMOTE => c"SHARE ON REMOTE NODES ONLY",
        PMIX_GLOBAL => c"SHARE ACROSS ALL NODES",
        PMIX_INTERNAL => c"STORE INTERNALLY",
        _ => c"UNKNOWN SCOPE",
    };
    s.as_ptr()
}

#[no_mangle]
pub extern "C" fn PMIx_Data_range_string(range: pmix_data_range_t) -> *const c_char {
    let s: &'static std::ffi::CStr = match u32::from(range) {
        PMIX_RANGE_UNDEF => c"UNDEFINED",
        PMIX_RANGE_RM => c"INTENDED FOR HOST RESOURCE MANAGER ONLY",
        PMIX_RANGE_LOCAL => c"AVAIL ON LOCAL NODE ONLY",
        PMIX_RANGE_NAMESPACE => c"AVAIL TO NAMESPACE ONLY",
        PMIX_RANGE_SESSION => c"AVAIL TO ENTIRE SESSION",
        PMIX_RANGE_GLOBAL => c"AVAIL TO ANYONE WITH AUTHORIZATION",
        PMIX_RANGE_CUSTOM => c"AVAIL AS SPECIFIED IN DIRECTIVES",
        PMIX_RANGE_PROC_LOCAL => c"AVAIL ON LOCAL PROC ONLY",
        _ => c"UNKNOWN RANGE",
    };
    s.as_ptr()
}

/// Progress is made by the library's own threads; nothing to do.
#[no_mangle]
pub extern "C" fn PMIx_Progress() {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::ptr::{null, null_mut};

    fn empty_value() -> pmix_value_t {
        pmix_value_t {
            type_: PMIX_UNDEF,
            data: pmix_value_data { uint64: 0 },
        }
    }

    #[test]
    fn calls_before_init_fail_with_init_and_bad_arguments_do_not_crash() {
        assert_eq!(PMIx_Initialized(), 0);
        let mut v: *mut pmix_value_t = null_mut();
        // SAFETY: NULL and valid arguments mixed, as a careless caller might.
        unsafe {
            assert_eq!(PMIx_Get(null(), null(), null(), 0, &mut v), PMIX_ERR_INIT);
            assert_eq!(
                PMIx_Put(PMIX_GLOBAL as u8, null(), null_mut()),
                PMIX_ERR_INIT
            );
            assert_eq!(PMIx_Fence(null(), 3, null(), 0), PMIX_ERR_INIT);
            assert_eq!(PMIx_Finalize(null(), 0), PMIX_ERR_INIT);
            assert_eq!(
                PMIx_Value_load(null_mut(), null(), PMIX_STRING),
                PMIX_ERR_BAD_PARAM
            );
            assert_eq!(PMIx_Value_xfer(null_mut(), null()), PMIX_ERR_BAD_PARAM);
            PMIx_Value_destruct(null_mut());
        }
        assert_eq!(PMIx_Commit(), PMIX_ERR_INIT);
    }

    #[test]
    fn info_load_value_xfer_and_unload_copy_what_they_are_given() {
        // SAFETY: local values, each destructed once.
        unsafe {
            let mut info: pmix_info_t = std::mem::zeroed();
            let s = c"hello";
            assert_eq!(
                PMIx_Info_load(&mut info, c"k".as_ptr(), s.as_ptr().cast(), PMIX_STRING),
                PMIX_SUCCESS
            );
            assert_eq!(value::key_in(&info.key), "k");
            assert_eq!(CStr::from_ptr(info.value.data.string), s);
            let mut copy = empty_value();
            assert_eq!(PMIx_Value_xfer(&mut copy, &info.value), PMIX_SUCCESS);
            assert_ne!(copy.data.string, info.value.data.string);
            let (mut data, mut sz): (*mut c_void, usize) = (null_mut(), 0);
            assert_eq!(
                PMIx_Value_unload(&mut copy, &mut data, &mut sz),
                PMIX_SUCCESS
            );
            assert_eq!(CStr::from_ptr(data.cast()), s);
            libc::free(data);
            PMIx_Value_destruct(&mut copy);
            PMIx_Value_destruct(&mut info.value);

            let x: u16 = 4242;
            let mut v = empty_value();
            assert_eq!(
                PMIx_Value_load(&mut v, (&x as *const u16).cast(), PMIX_UINT16),
                PMIX_SUCCESS
            );
            assert_eq!((v.type_, v.data.uint16), (PMIX_UINT16, 4242));
            let mut out: u16 = 0;
            let mut p = (&mut out as *mut u16).cast::<c_void>();
            assert_eq!(PMIx_Value_unload(&mut v, &mut p, &mut sz), PMIX_SUCCESS);
            assert_eq!((out, sz), (4242, 2));
        }
    }

    #[test]
    fn type_and_status_names() {
        // SAFETY: the library returns static NUL-terminated strings.
        unsafe {
            assert_eq!(
                CStr::from_ptr(PMIx_Data_type_string(PMIX_UINT16)),
                c"PMIX_UINT16"
            );
            assert_eq!(
                CStr::from_ptr(PMIx_Error_string(PMIX_ERR_NOT_FOUND)),
                c"NOT-FOUND"
            );
            assert!(CStr::from_ptr(PMIx_Get_version())
                .to_str()
                .unwrap()
                .starts_with("cohort "));
        }
    }
}
