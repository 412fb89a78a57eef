//! C ABI of the cohort client library: `include/cohort.h` declares what this crate
//! exports (`libcohort_c.so` / `libcohort_c.a`). Each function wraps the blocking form
//! of the Rust call of the same name in [`cohort::Client`]; errors become negative
//! status codes, and the calling thread's last error message (naming the group,
//! process or node server involved) is kept for [`cohort_last_error`].
//!
//! The `#define`s of the header are checked against the constants here by this crate's
//! tests; the structures' layout by `cluster-tests/tests/capi.rs`, which compiles a C
//! program against the header and runs it under `cohort run`.

// The types keep the names the header gives them.
#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::Mutex;
use std::time::Duration;

use std::future::Future;
use std::sync::OnceLock;

use cohort::{
    Client, CohortError, ConnectOpts, ConstructOpts, ConstructStatus, DisconnectOpts, Event,
    FailedMembers, FenceOpts, GroupResult, HandlerId, InviteOpts, ProcId, Range, Scope, Value,
};

mod info;
mod publish;
mod spawn;

pub use info::{cohort_group_info_t, cohort_info_t};
use info::{free_group_info, group_info_out, info_in, info_out};
pub use publish::{cohort_lookup_opts_t, cohort_publish_opts_t, cohort_published_t};
pub use spawn::{cohort_spawn_app_t, cohort_spawn_opts_t};

pub const COHORT_MAX_NSLEN: usize = 255;

/// Defines `c_int` constants and a list of them by name (NUL-terminated), so that the
/// header's `#define`s are checked against one list and status names come from it.
macro_rules! c_constants {
    ($list:ident: $($name:ident = $value:expr,)*) => {
        $(pub const $name: c_int = $value;)*
        // Some lists serve only the header's test.
        #[cfg_attr(not(test), allow(dead_code))]
        const $list: &[(&str, c_int)] = &[$((concat!(stringify!($name), "\0"), $name)),*];
    };
}

c_constants! { STATUSES:
    COHORT_SUCCESS = 0,
    COHORT_ERR_BAD_PARAM = -1,
    COHORT_ERR_INVALID_GROUP_ID = -2,
    COHORT_ERR_UNKNOWN_PROC = -3,
    COHORT_ERR_GROUP_NOT_FOUND = -4,
    COHORT_ERR_NOT_A_MEMBER = -5,
    COHORT_ERR_GROUP_ID_IN_USE = -6,
    COHORT_ERR_MISMATCH = -7,
    COHORT_ERR_NOT_LEADER = -8,
    COHORT_ERR_TIMEOUT = -9,
    COHORT_ERR_PROC_TERMINATED = -10,
    COHORT_ERR_NOT_FOUND = -11,
    COHORT_ERR_PEER_LOST = -12,
    COHORT_ERR_CONSTRUCT_ABORTED = -13,
    COHORT_ERR_BAD_REQUEST = -14,
    COHORT_ERR_SERVER_LOST = -15,
    COHORT_ERR_AUTH_REFUSED = -16,
    COHORT_ERR_PROTOCOL = -17,
    COHORT_ERR_IO = -18,
    COHORT_ERR_NOT_SUPPORTED = -19,
    COHORT_ERR_PSET_NOT_FOUND = -20,
    COHORT_ERR_KEY_PUBLISHED = -21,
}

c_constants! { OTHER_CONSTANTS:
    COHORT_SCOPE_LOCAL = 0,
    COHORT_SCOPE_REMOTE = 1,
    COHORT_SCOPE_GLOBAL = 2,
    COHORT_VALUE_BOOL = 1,
    COHORT_VALUE_U32 = 2,
    COHORT_VALUE_U64 = 3,
    COHORT_VALUE_I64 = 4,
    COHORT_VALUE_F64 = 5,
    COHORT_VALUE_STRING = 6,
    COHORT_VALUE_BYTES = 7,
    COHORT_VALUE_PROCS = 8,
    COHORT_VALUE_OTHER = 9,
    COHORT_VALUE_STRINGS = 10,
    COHORT_RANGE_LOCAL = 0,
    COHORT_RANGE_NAMESPACE = 1,
    COHORT_RANGE_SESSION = 2,
    COHORT_RANGE_GROUP = 3,
    COHORT_RANGE_PROCS = 4,
    COHORT_DATA_RANGE_SESSION = 0,
    COHORT_DATA_RANGE_NAMESPACE = 1,
    COHORT_DATA_RANGE_LOCAL = 2,
    COHORT_DATA_RANGE_PROC_LOCAL = 3,
    COHORT_DATA_RANGE_GLOBAL = 4,
    COHORT_DATA_RANGE_CUSTOM = 5,
    COHORT_PERSIST_APP = 0,
    COHORT_PERSIST_INDEF = 1,
    COHORT_PERSIST_FIRST_READ = 2,
    COHORT_PERSIST_PROC = 3,
    COHORT_PERSIST_SESSION = 4,
    COHORT_WAIT_ALL = -1,
    COHORT_MAP_BLOCK = 0,
    COHORT_MAP_ROUND_ROBIN = 1,
    COHORT_MAP_PER_NODE = 2,
}

/// The opaque client handle.
pub struct cohort_client {
    client: Client,
    nspace: CString,
    handlers: Mutex<(u64, HashMap<u64, HandlerId>)>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct cohort_proc_t {
    pub nspace: [c_char; COHORT_MAX_NSLEN + 1],
    pub rank: u32,
}

#[repr(C)]
pub struct cohort_value_t {
    pub type_: c_int,
    pub boolean: c_int,
    pub u32_: u32,
    pub u64_: u64,
    pub i64_: i64,
    pub f64_: f64,
    pub str_: *mut c_char,
    pub bytes: *mut c_void,
    pub procs: *mut cohort_proc_t,
    pub strs: *mut *mut c_char,
    pub len: usize,
}

#[repr(C)]
pub struct cohort_construct_opts_t {
    pub timeout_ms: c_int,
    pub optional: c_int,
    pub leader: c_int,
    pub notify_termination: c_int,
    pub assign_context_id: c_int,
    pub bootstrap: u32,
    pub add_members: *const cohort_proc_t,
    pub nadd_members: usize,
    pub group_info: *const cohort_info_t,
    pub ngroup_info: usize,
    /// PMIX_GROUP_LOCAL_ONLY: every participant runs on this node server.
    pub local_only: c_int,
}

#[repr(C)]
pub struct cohort_invite_opts_t {
    pub timeout_ms: c_int,
    pub assign_context_id: c_int,
    pub notify_termination: c_int,
    pub group_info: *const cohort_info_t,
    pub ngroup_info: usize,
}

pub type cohort_op_cb = Option<unsafe extern "C" fn(status: c_int, cbdata: *mut c_void)>;
pub type cohort_group_cb =
    Option<unsafe extern "C" fn(status: c_int, group: *const cohort_group_t, cbdata: *mut c_void)>;
pub type cohort_failed_cb = Option<
    unsafe extern "C" fn(status: c_int, failed: *const cohort_failed_t, cbdata: *mut c_void),
>;
pub type cohort_connect_cb = Option<
    unsafe extern "C" fn(status: c_int, nspace: *const c_char, rank: u32, cbdata: *mut c_void),
>;
pub type cohort_value_cb =
    Option<unsafe extern "C" fn(status: c_int, value: *const cohort_value_t, cbdata: *mut c_void)>;

#[repr(C)]
pub struct cohort_group_t {
    pub members: *mut cohort_proc_t,
    pub nmembers: usize,
    pub has_context_id: c_int,
    pub context_id: u64,
    pub partial: c_int,
    pub failed: *mut cohort_proc_t,
    pub nfailed: usize,
    pub info: *mut cohort_group_info_t,
    pub ninfo: usize,
}

#[repr(C)]
pub struct cohort_failed_t {
    pub failed: *mut cohort_proc_t,
    pub nfailed: usize,
    pub fresh: *mut cohort_proc_t,
    pub nfresh: usize,
}

pub type cohort_event_fn = Option<
    unsafe extern "C" fn(
        code: c_int,
        source: *const cohort_proc_t,
        affected: *const cohort_proc_t,
        naffected: usize,
        group: *const c_char,
        cbdata: *mut c_void,
    ),
>;

/// An event as [`cohort_register_event_callback`]'s handlers get it.
#[repr(C)]
pub struct cohort_event_t {
    pub code: c_int,
    pub source: cohort_proc_t,
    pub affected: *const cohort_proc_t,
    pub naffected: usize,
    pub group: *const c_char,
    pub info: *const cohort_info_t,
    pub ninfo: usize,
}

pub type cohort_event_cb =
    Option<unsafe extern "C" fn(event: *const cohort_event_t, cbdata: *mut c_void)>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(message: String) {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// A bad argument: its status, with `what` as the message.
fn bad_param(what: impl Into<String>) -> c_int {
    set_error(what.into());
    COHORT_ERR_BAD_PARAM
}

/// The status of `e`, which becomes the thread's last error.
fn fail(e: CohortError) -> c_int {
    let status = status_of(&e);
    set_error(e.to_string());
    status
}

fn status_of(e: &CohortError) -> c_int {
    use CohortError::*;
    match e {
        InvalidGroupId { .. } => COHORT_ERR_INVALID_GROUP_ID,
        UnknownProc { .. } => COHORT_ERR_UNKNOWN_PROC,
        GroupNotFound { .. } => COHORT_ERR_GROUP_NOT_FOUND,
        NotAMember { .. } => COHORT_ERR_NOT_A_MEMBER,
        GroupIdInUse { .. } => COHORT_ERR_GROUP_ID_IN_USE,
        LeaderMismatch { .. } | LeaderCountMismatch { .. } | Mismatch { .. } => COHORT_ERR_MISMATCH,
        NotLeader { .. } => COHORT_ERR_NOT_LEADER,
        Timeout { .. } => COHORT_ERR_TIMEOUT,
        ProcTerminated { .. } => COHORT_ERR_PROC_TERMINATED,
        NotFound { .. } => COHORT_ERR_NOT_FOUND,
        PeerLost { .. } => COHORT_ERR_PEER_LOST,
        ConstructAborted { .. } => COHORT_ERR_CONSTRUCT_ABORTED,
        BadRequest(_) => COHORT_ERR_BAD_REQUEST,
        ServerLost(_) => COHORT_ERR_SERVER_LOST,
        AuthRefused(_) => COHORT_ERR_AUTH_REFUSED,
        Protocol(_) => COHORT_ERR_PROTOCOL,
        Io(_) => COHORT_ERR_IO,
        NotSupported(_) => COHORT_ERR_NOT_SUPPORTED,
        PsetNotFound { .. } => COHORT_ERR_PSET_NOT_FOUND,
        KeyPublished { .. } => COHORT_ERR_KEY_PUBLISHED,
        #[allow(unreachable_patterns)]
        _ => COHORT_ERR_PROTOCOL,
    }
}

/// Runs `f` and turns its result into a status.
fn status(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    match f() {
        Ok(()) => COHORT_SUCCESS,
        Err(s) => s,
    }
}

/// `s` as a `&str`, naming `what` when it is NULL or not UTF-8.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that outlives the call.
unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str, c_int> {
    if s.is_null() {
        return Err(bad_param(format!("{what} is NULL")));
    }
    CStr::from_ptr(s)
        .to_str()
        .map_err(|_| bad_param(format!("{what} is not UTF-8")))
}

/// # Safety
/// `client` is NULL or a handle from [`cohort_init`] not yet finalized.
unsafe fn handle<'a>(client: *const cohort_client) -> Result<&'a cohort_client, c_int> {
    client
        .as_ref()
        .ok_or_else(|| bad_param("the client handle is NULL"))
}

/// # Safety
/// `procs` is NULL with `n` 0, or points to `n` processes.
unsafe fn procs_in(procs: *const cohort_proc_t, n: usize) -> Result<Vec<ProcId>, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if procs.is_null() {
        return Err(bad_param(format!("a list of {n} processes is NULL")));
    }
    std::slice::from_raw_parts(procs, n)
        .iter()
        .map(proc_in)
        .collect()
}

/// The process `p` points to; `what` names it when it is NULL.
///
/// # Safety
/// `p` is NULL or points to a process.
unsafe fn one_proc(p: *const cohort_proc_t, what: &str) -> Result<ProcId, c_int> {
    proc_in(
        p.as_ref()
            .ok_or_else(|| bad_param(format!("{what} is NULL")))?,
    )
}

fn proc_in(p: &cohort_proc_t) -> Result<ProcId, c_int> {
    let bytes: Vec<u8> = p
        .nspace
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    if bytes.len() > COHORT_MAX_NSLEN {
        return Err(bad_param("a process's nspace is not NUL-terminated"));
    }
    let nspace = String::from_utf8(bytes).map_err(|_| bad_param("a nspace is not UTF-8"))?;
    Ok(ProcId::new(nspace, p.rank))
}

fn proc_out(p: &ProcId) -> cohort_proc_t {
    let mut out = cohort_proc_t {
        nspace: [0; COHORT_MAX_NSLEN + 1],
        rank: p.rank,
    };
    for (d, &b) in out
        .nspace
        .iter_mut()
        .zip(p.nspace.as_bytes().iter().take(COHORT_MAX_NSLEN))
    {
        *d = b as c_char;
    }
    out
}

/// A list handed to C: `(pointer, length)`, released by [`free_procs`].
fn procs_out(procs: &[ProcId]) -> (*mut cohort_proc_t, usize) {
    if procs.is_empty() {
        return (std::ptr::null_mut(), 0);
    }
    let list: Box<[cohort_proc_t]> = procs.iter().map(proc_out).collect();
    let n = list.len();
    (Box::into_raw(list).cast(), n)
}

/// # Safety
/// `(p, n)` came from [`procs_out`] and was not released.
unsafe fn free_procs(p: *mut cohort_proc_t, n: usize) {
    if !p.is_null() {
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)));
    }
}

/// Releases the list `(*p, *n)` and leaves it empty, so a second release is harmless.
///
/// # Safety
/// As [`free_procs`].
unsafe fn take_procs(p: &mut *mut cohort_proc_t, n: &mut usize) {
    free_procs(
        std::mem::replace(p, std::ptr::null_mut()),
        std::mem::take(n),
    );
}

/// A string list handed to C, released by [`cohort_strings_free`].
fn strings_out(v: &[String]) -> (*mut *mut c_char, usize) {
    if v.is_empty() {
        return (std::ptr::null_mut(), 0);
    }
    let list: Box<[*mut c_char]> = v
        .iter()
        .map(|s| {
            CString::new(s.replace('\0', " "))
                .unwrap_or_default()
                .into_raw()
        })
        .collect();
    let n = list.len();
    (Box::into_raw(list).cast(), n)
}

/// Releases a string list the library handed out.
///
/// # Safety
/// `(strs, n)` came from this library and was not released.
#[no_mangle]
pub unsafe extern "C" fn cohort_strings_free(strs: *mut *mut c_char, n: usize) {
    if strs.is_null() {
        return;
    }
    let list = Box::from_raw(std::ptr::slice_from_raw_parts_mut(strs, n));
    for &s in list.iter() {
        if !s.is_null() {
            drop(CString::from_raw(s));
        }
    }
}

/// Releases a process list the library handed out.
///
/// # Safety
/// `(procs, n)` came from this library and was not released.
#[no_mangle]
pub unsafe extern "C" fn cohort_procs_free(procs: *mut cohort_proc_t, n: usize) {
    free_procs(procs, n);
}

fn timeout(ms: c_int) -> Option<Duration> {
    timeout_ms(ms).map(Duration::from_millis)
}

/// A C interface timeout (milliseconds; zero or negative: none) as the options' field.
pub(crate) fn timeout_ms(ms: c_int) -> Option<u64> {
    u64::try_from(ms).ok().filter(|&ms| ms > 0)
}

fn scope(s: c_int) -> Result<Scope, c_int> {
    match s {
        COHORT_SCOPE_LOCAL => Ok(Scope::Local),
        COHORT_SCOPE_REMOTE => Ok(Scope::Remote),
        COHORT_SCOPE_GLOBAL => Ok(Scope::Global),
        other => Err(bad_param(format!("unknown scope {other}"))),
    }
}

/// Connects to the node server this process was started under.
///
/// # Safety
/// `client` points to writable storage for a handle.
#[no_mangle]
pub unsafe extern "C" fn cohort_init(client: *mut *mut cohort_client) -> c_int {
    if client.is_null() {
        return bad_param("cohort_init: the handle's address is NULL");
    }
    match Client::init() {
        Ok(c) => {
            let nspace = CString::new(c.nspace()).unwrap_or_default();
            *client = Box::into_raw(Box::new(cohort_client {
                client: c,
                nspace,
                handlers: Mutex::new((0, HashMap::new())),
            }));
            COHORT_SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// Finalizes and releases `client`.
///
/// # Safety
/// `client` is a handle from [`cohort_init`], not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn cohort_finalize(client: *mut cohort_client) -> c_int {
    if client.is_null() {
        return bad_param("the client handle is NULL");
    }
    let c = Box::from_raw(client);
    match c.client.finalize() {
        Ok(()) => COHORT_SUCCESS,
        Err(e) => fail(e),
    }
}

/// # Safety
/// `client` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn cohort_rank(client: *const cohort_client) -> u32 {
    client.as_ref().map_or(u32::MAX, |c| c.client.rank())
}

/// # Safety
/// `client` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn cohort_size(client: *const cohort_client) -> u32 {
    client.as_ref().map_or(0, |c| c.client.size())
}

/// # Safety
/// `client` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn cohort_nspace(client: *const cohort_client) -> *const c_char {
    client
        .as_ref()
        .map_or(std::ptr::null(), |c| c.nspace.as_ptr())
}

/// The calling thread's last error message.
#[no_mangle]
pub extern "C" fn cohort_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The name of a status code.
#[no_mangle]
pub extern "C" fn cohort_status_name(status: c_int) -> *const c_char {
    STATUSES
        .iter()
        .find(|&&(_, value)| value == status)
        .map_or(c"COHORT_ERR_UNKNOWN".as_ptr(), |(name, _)| {
            name.as_ptr().cast()
        })
}

/// # Safety
/// `client` is a live handle, `key` a string.
unsafe fn put(client: *mut cohort_client, scope_: c_int, key: *const c_char, v: Value) -> c_int {
    status(|| {
        let c = handle(client)?;
        let key = text(key, "the key")?;
        c.client.put(scope(scope_)?, key, v).map_err(fail)
    })
}

/// # Safety
/// `client` is a live handle; `key` and `value` are strings.
#[no_mangle]
pub unsafe extern "C" fn cohort_put_string(
    client: *mut cohort_client,
    scope: c_int,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    match text(value, "the value") {
        Ok(v) => put(client, scope, key, Value::Str(v.to_string())),
        Err(s) => s,
    }
}

/// # Safety
/// `client` is a live handle; `key` a string.
#[no_mangle]
pub unsafe extern "C" fn cohort_put_u64(
    client: *mut cohort_client,
    scope: c_int,
    key: *const c_char,
    value: u64,
) -> c_int {
    put(client, scope, key, Value::U64(value))
}

/// # Safety
/// `client` is a live handle; `key` a string; `data` points to `len` bytes (or `len`
/// is 0).
#[no_mangle]
pub unsafe extern "C" fn cohort_put_bytes(
    client: *mut cohort_client,
    scope: c_int,
    key: *const c_char,
    data: *const c_void,
    len: usize,
) -> c_int {
    if data.is_null() && len > 0 {
        return bad_param("the data is NULL");
    }
    let bytes = if len == 0 {
        Vec::new()
    } else {
        std::slice::from_raw_parts(data.cast::<u8>(), len).to_vec()
    };
    put(client, scope, key, Value::from(bytes))
}

/// # Safety
/// `client` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn cohort_commit(client: *mut cohort_client) -> c_int {
    status(|| handle(client)?.client.commit().map_err(fail))
}

fn value_out(v: Value) -> cohort_value_t {
    let mut out = cohort_value_t {
        type_: COHORT_VALUE_OTHER,
        boolean: 0,
        u32_: 0,
        u64_: 0,
        i64_: 0,
        f64_: 0.0,
        str_: std::ptr::null_mut(),
        bytes: std::ptr::null_mut(),
        procs: std::ptr::null_mut(),
        strs: std::ptr::null_mut(),
        len: 0,
    };
    let string = |s: String| info::c_string(&s);
    match v {
        Value::Bool(b) => (out.type_, out.boolean) = (COHORT_VALUE_BOOL, b.into()),
        Value::U32(x) => (out.type_, out.u32_) = (COHORT_VALUE_U32, x),
        Value::U64(x) => (out.type_, out.u64_) = (COHORT_VALUE_U64, x),
        Value::I64(x) => (out.type_, out.i64_) = (COHORT_VALUE_I64, x),
        Value::F64(x) => (out.type_, out.f64_) = (COHORT_VALUE_F64, x),
        Value::Str(s) => (out.type_, out.str_) = (COHORT_VALUE_STRING, string(s)),
        Value::Bytes(b) => {
            let bytes: Box<[u8]> = b.to_vec().into_boxed_slice();
            out.type_ = COHORT_VALUE_BYTES;
            out.len = bytes.len();
            out.bytes = if bytes.is_empty() {
                std::ptr::null_mut()
            } else {
                Box::into_raw(bytes).cast()
            };
        }
        Value::Procs(p) => {
            out.type_ = COHORT_VALUE_PROCS;
            (out.procs, out.len) = procs_out(&p);
        }
        Value::Strs(v) => {
            out.type_ = COHORT_VALUE_STRINGS;
            (out.strs, out.len) = strings_out(&v);
        }
        #[allow(unreachable_patterns)]
        other => out.str_ = string(format!("{other:?}")),
    }
    out
}

/// # Safety
/// `client` is a live handle; `proc` a process; `key` a string; `value` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_get(
    client: *mut cohort_client,
    proc: *const cohort_proc_t,
    key: *const c_char,
    timeout_ms: c_int,
    value: *mut cohort_value_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let p = one_proc(proc, "the process")?;
        let key = text(key, "the key")?;
        if value.is_null() {
            return Err(bad_param("the value's address is NULL"));
        }
        let v = c.client.get(&p, key, timeout(timeout_ms)).map_err(fail)?;
        value.write(value_out(v));
        Ok(())
    })
}

/// # Safety
/// `value` is NULL or was filled by [`cohort_get`] and not released.
#[no_mangle]
pub unsafe extern "C" fn cohort_value_free(value: *mut cohort_value_t) {
    let Some(v) = value.as_mut() else { return };
    if !v.str_.is_null() {
        drop(CString::from_raw(v.str_));
    }
    match v.type_ {
        COHORT_VALUE_BYTES if !v.bytes.is_null() => drop(Box::from_raw(
            std::ptr::slice_from_raw_parts_mut(v.bytes.cast::<u8>(), v.len),
        )),
        COHORT_VALUE_PROCS => free_procs(v.procs, v.len),
        COHORT_VALUE_STRINGS => cohort_strings_free(v.strs, v.len),
        _ => {}
    }
    v.strs = std::ptr::null_mut();
    v.str_ = std::ptr::null_mut();
    v.bytes = std::ptr::null_mut();
    v.procs = std::ptr::null_mut();
    v.len = 0;
}

/// # Safety
/// `client` is a live handle; `procs` points to `nprocs` processes.
#[no_mangle]
pub unsafe extern "C" fn cohort_fence(
    client: *mut cohort_client,
    procs: *const cohort_proc_t,
    nprocs: usize,
    collect: c_int,
    timeout_ms: c_int,
) -> c_int {
    fence(client, procs, nprocs, collect, timeout_ms, false)
}

/// `cohort_fence` and `cohort_fence_ft`.
///
/// # Safety
/// As `cohort_fence`.
unsafe fn fence(
    client: *mut cohort_client,
    procs: *const cohort_proc_t,
    nprocs: usize,
    collect: c_int,
    timeout_ms: c_int,
    ft_collective: bool,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let procs = procs_in(procs, nprocs)?;
        let opts = FenceOpts {
            collect: collect != 0,
            timeout_ms: crate::timeout_ms(timeout_ms),
            ft_collective,
        };
        c.client.fence(&procs, opts).map_err(fail)
    })
}

/// # Safety
/// As `cohort_fence`.
#[no_mangle]
pub unsafe extern "C" fn cohort_fence_ft(
    client: *mut cohort_client,
    procs: *const cohort_proc_t,
    nprocs: usize,
    collect: c_int,
    timeout_ms: c_int,
) -> c_int {
    fence(client, procs, nprocs, collect, timeout_ms, true)
}

/// # Safety
/// `client` is a live handle; `id` a string; `procs` points to `nprocs` processes;
/// `opts` is NULL or options; `group` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_construct(
    client: *mut cohort_client,
    id: *const c_char,
    procs: *const cohort_proc_t,
    nprocs: usize,
    opts: *const cohort_construct_opts_t,
    group: *mut cohort_group_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let id = text(id, "the group id")?;
        let procs = procs_in(procs, nprocs)?;
        if group.is_null() {
            return Err(bad_param("the group's address is NULL"));
        }
        let opts = construct_opts(opts)?;
        let g = c.client.group_construct(id, &procs, opts).map_err(fail)?;
        group.write(group_out(&g));
        Ok(())
    })
}
/// # Safety
/// `opts` is NULL or options whose `add_members` points to `nadd_members` processes.
unsafe fn construct_opts(opts: *const cohort_construct_opts_t) -> Result<ConstructOpts, c_int> {
    let Some(o) = opts.as_ref() else {
        return Ok(ConstructOpts::default());
    };
    Ok(ConstructOpts {
        timeout_ms: timeout_ms(o.timeout_ms),
        optional: o.optional != 0,
        leader: o.leader != 0,
        notify_termination: o.notify_termination != 0,
        assign_context_id: o.assign_context_id != 0,
        bootstrap: (o.bootstrap > 0).then_some(o.bootstrap),
        add_members: procs_in(o.add_members, o.nadd_members)?,
        group_info: info_in(o.group_info, o.ngroup_info)?,
        local_only: o.local_only != 0,
        ..Default::default()
    })
}

/// # Safety
/// `opts` is NULL or options whose `group_info` points to `ngroup_info` entries.
unsafe fn invite_opts(opts: *const cohort_invite_opts_t) -> Result<InviteOpts, c_int> {
    let Some(o) = opts.as_ref() else {
        return Ok(InviteOpts::default());
    };
    Ok(InviteOpts {
        timeout_ms: timeout_ms(o.timeout_ms),
        assign_context_id: o.assign_context_id != 0,
        notify_termination: o.notify_termination != 0,
        group_info: info_in(o.group_info, o.ngroup_info)?,
        ..Default::default()
    })
}

fn group_out(g: &GroupResult) -> cohort_group_t {
    let (members, nmembers) = procs_out(&g.members);
    let (failed, nfailed) = procs_out(&g.failed);
    let (info, ninfo) = group_info_out(&g.group_info);
    cohort_group_t {
        members,
        nmembers,
        has_context_id: g.context_id.is_some().into(),
        context_id: g.context_id.unwrap_or(0),
        partial: (g.status == ConstructStatus::PartialSuccess).into(),
        failed,
        nfailed,
        info,
        ninfo,
    }
}

/// # Safety
/// `client` is a live handle; `id` a string; `procs` points to `nprocs` processes;
/// `opts` is NULL or options; `group` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_invite(
    client: *mut cohort_client,
    id: *const c_char,
    procs: *const cohort_proc_t,
    nprocs: usize,
    opts: *const cohort_invite_opts_t,
    group: *mut cohort_group_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let id = text(id, "the group id")?;
        let procs = procs_in(procs, nprocs)?;
        if group.is_null() {
            return Err(bad_param("the group's address is NULL"));
        }
        let opts = invite_opts(opts)?;
        let g = c.client.group_invite(id, &procs, opts).map_err(fail)?;
        group.write(group_out(&g));
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `id` a string; `leader` a process; `info` points to
/// `ninfo` entries; `group` NULL or writable (left untouched on a decline).
#[no_mangle]
pub unsafe extern "C" fn cohort_group_join(
    client: *mut cohort_client,
    id: *const c_char,
    leader: *const cohort_proc_t,
    accept: c_int,
    info: *const cohort_info_t,
    ninfo: usize,
    timeout_ms: c_int,
    group: *mut cohort_group_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let id = text(id, "the group id")?;
        let leader = one_proc(leader, "the leader")?;
        let info = info_in(info, ninfo)?;
        let joined = c
            .client
            .group_join(id, &leader, accept != 0, timeout(timeout_ms), info)
            .map_err(fail)?;
        if let (Some(g), false) = (joined, group.is_null()) {
            group.write(group_out(&g));
        }
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `id` a string; `group` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_query(
    client: *mut cohort_client,
    id: *const c_char,
    group: *mut cohort_group_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let id = text(id, "the group id")?;
        if group.is_null() {
            return Err(bad_param("the group's address is NULL"));
        }
        let g = c.client.group_query(id).map_err(fail)?;
        group.write(group_out(&g));
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `target` a string where `range` needs one; `procs`
/// points to `nprocs` processes, `info` to `ninfo` entries.
#[no_mangle]
pub unsafe extern "C" fn cohort_notify(
    client: *mut cohort_client,
    code: c_int,
    range: c_int,
    target: *const c_char,
    procs: *const cohort_proc_t,
    nprocs: usize,
    info: *const cohort_info_t,
    ninfo: usize,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let range = match range {
            COHORT_RANGE_LOCAL => Range::Local,
            COHORT_RANGE_NAMESPACE if target.is_null() => {
                Range::Namespace(c.client.nspace().to_string())
            }
            COHORT_RANGE_NAMESPACE => Range::Namespace(text(target, "the namespace")?.into()),
            COHORT_RANGE_SESSION => Range::Session,
            COHORT_RANGE_GROUP => Range::Group(text(target, "the group id")?.into()),
            COHORT_RANGE_PROCS => Range::Procs(procs_in(procs, nprocs)?),
            other => return Err(bad_param(format!("unknown range {other}"))),
        };
        c.client
            .notify(code, range, info_in(info, ninfo)?)
            .map_err(fail)
    })
}

// ------------------------------------------------------------------ psets, connect

/// # Safety
/// `client` is a live handle; `names` and `n` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_pset_names(
    client: *mut cohort_client,
    names: *mut *mut *mut c_char,
    n: *mut usize,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        if names.is_null() || n.is_null() {
            return Err(bad_param("an address for the result is NULL"));
        }
        let v = c.client.pset_names().map_err(fail)?;
        let (p, len) = strings_out(&v);
        names.write(p);
        n.write(len);
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `names` and `n` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_namespaces(
    client: *mut cohort_client,
    names: *mut *mut *mut c_char,
    n: *mut usize,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        if names.is_null() || n.is_null() {
            return Err(bad_param("an address for the result is NULL"));
        }
        let v: Vec<String> = c
            .client
            .namespaces()
            .map_err(fail)?
            .iter()
            .map(|ns| ns.to_string())
            .collect();
        let (p, len) = strings_out(&v);
        names.write(p);
        n.write(len);
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `name` a string; `procs` and `n` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_pset_members(
    client: *mut cohort_client,
    name: *const c_char,
    procs: *mut *mut cohort_proc_t,
    n: *mut usize,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let name = text(name, "the process set name")?;
        if procs.is_null() || n.is_null() {
            return Err(bad_param("an address for the result is NULL"));
        }
        let members = c.client.pset_members(name).map_err(fail)?;
        let (p, len) = procs_out(&members);
        procs.write(p);
        n.write(len);
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `proc` a process; `appnum` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_appnum(
    client: *mut cohort_client,
    proc: *const cohort_proc_t,
    appnum: *mut u32,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let p = one_proc(proc, "the process")?;
        if appnum.is_null() {
            return Err(bad_param("the result's address is NULL"));
        }
        appnum.write(c.client.appnum(&p).map_err(fail)?);
        Ok(())
    })
}

#[repr(C)]
pub struct cohort_connect_opts_t {
    pub connect_id: *const c_char,
    pub timeout_ms: c_int,
    pub optional: c_int,
    pub early_term_allowed: c_int,
    pub xchg_only: c_int,
    pub notify_each: c_int,
}

/// # Safety
/// `opts` is NULL or options whose `connect_id` is NULL or a string.
unsafe fn connect_opts(opts: *const cohort_connect_opts_t) -> Result<ConnectOpts, c_int> {
    let Some(o) = opts.as_ref() else {
        return Ok(ConnectOpts::default());
    };
    Ok(ConnectOpts {
        connect_id: if o.connect_id.is_null() {
            None
        } else {
            Some(text(o.connect_id, "the connect id")?.to_string())
        },
        timeout: timeout(o.timeout_ms),
        optional: o.optional != 0,
        early_term_allowed: o.early_term_allowed != 0,
        xchg_only: o.xchg_only != 0,
        notify_each: o.notify_each != 0,
    })
}

/// # Safety
/// `client` is a live handle; `procs` points to `nprocs` processes; `opts` is NULL or
/// options; `nspace` is NULL or holds `COHORT_MAX_NSLEN + 1` bytes; `rank` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_connect(
    client: *mut cohort_client,
    procs: *const cohort_proc_t,
    nprocs: usize,
    opts: *const cohort_connect_opts_t,
    nspace: *mut c_char,
    rank: *mut u32,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let procs = procs_in(procs, nprocs)?;
        let opts = connect_opts(opts)?;
        let conn = c.client.connect_procs(&procs, opts).map_err(fail)?;
        if !nspace.is_null() {
            let name = conn.nspace.unwrap_or_default();
            let bytes = &name.as_bytes()[..name.len().min(COHORT_MAX_NSLEN)];
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), nspace, bytes.len());
            nspace.add(bytes.len()).write(0);
        }
        if !rank.is_null() {
            rank.write(conn.rank.unwrap_or(u32::MAX));
        }
        Ok(())
    })
}

fn disconnect_opts(timeout_ms: c_int) -> DisconnectOpts {
    DisconnectOpts {
        timeout: timeout(timeout_ms),
        ..Default::default()
    }
}

/// # Safety
/// `client` is a live handle; `nspace` a string.
#[no_mangle]
pub unsafe extern "C" fn cohort_disconnect(
    client: *mut cohort_client,
    nspace: *const c_char,
    timeout_ms: c_int,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let nspace = text(nspace, "the nspace")?;
        c.client
            .disconnect(nspace, disconnect_opts(timeout_ms))
            .map_err(fail)
    })
}

// ------------------------------------------------------------------ non-blocking

/// The thread that drives the non-blocking calls and runs their callbacks.
fn completions() -> &'static tokio::runtime::Handle {
    static RT: OnceLock<tokio::runtime::Handle> = OnceLock::new();
    RT.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime builds");
        let handle = rt.handle().clone();
        std::thread::Builder::new()
            .name("cohort-c-completions".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .expect("the completion thread starts");
        handle
    })
}

/// Runs `fut` on the completion thread, then `done` with its result there.
fn complete<T: Send + 'static>(
    fut: impl Future<Output = Result<T, CohortError>> + Send + 'static,
    done: impl FnOnce(Result<T, c_int>) + Send + 'static,
) {
    completions().spawn(async move { done(fut.await.map_err(fail)) });
}

fn code_of<T>(r: &Result<T, c_int>) -> c_int {
    match r {
        Ok(_) => COHORT_SUCCESS,
        Err(s) => *s,
    }
}

/// Runs `fut` on the completion thread, then calls `cb` with its status and the
/// caller's data.
fn complete_op<T: Send + 'static>(
    fut: impl Future<Output = Result<T, CohortError>> + Send + 'static,
    cb: unsafe extern "C" fn(c_int, *mut c_void),
    data: CbData,
) {
    complete(fut, move |r| {
        let data = data;
        // SAFETY: the caller's callback, with its own data.
        unsafe { cb(code_of(&r), data.0) }
    });
}

/// # Safety
/// `client` is a live handle; `procs` points to `nprocs` processes; `cb` is called once
/// on the library's completion thread with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn cohort_fence_nb(
    client: *mut cohort_client,
    procs: *const cohort_proc_t,
    nprocs: usize,
    collect: c_int,
    timeout_ms: c_int,
    cb: cohort_op_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let procs = procs_in(procs, nprocs)?;
        let opts = FenceOpts {
            collect: collect != 0,
            timeout_ms: crate::timeout_ms(timeout_ms),
            ft_collective: false,
        };
        complete_op(c.client.fence_async(&procs, opts), cb, CbData(cbdata));
        Ok(())
    })
}

type GroupCb = unsafe extern "C" fn(c_int, *const cohort_group_t, *mut c_void);

/// Runs `fut` on the completion thread, then calls `cb` with its status, its group
/// (NULL when none), valid during the call, and the caller's data.
fn complete_group(
    fut: impl Future<Output = Result<Option<GroupResult>, CohortError>> + Send + 'static,
    cb: GroupCb,
    data: CbData,
) {
    complete(fut, move |r| {
        let data = data; // the whole (Send) wrapper, not its raw field
        let status = code_of(&r);
        let group = r.ok().flatten().map(|g| group_out(&g));
        // SAFETY: the caller's callback, with its own data and a group it does not keep.
        unsafe { lend(group, cohort_group_free, |g| cb(status, g, data.0)) };
    });
}

/// Lends `value` to `call` as a pointer (NULL when there is none), valid during the
/// call, then releases it with `free`.
///
/// # Safety
/// `free` releases what `value` holds, and `call` does not keep the pointer.
unsafe fn lend<T>(
    value: Option<T>,
    free: unsafe extern "C" fn(*mut T),
    call: impl FnOnce(*const T),
) {
    let mut value = value;
    call(value.as_ref().map_or(std::ptr::null(), |v| v as *const T));
    if let Some(v) = value.as_mut() {
        free(v);
    }
}

/// # Safety
/// As [`cohort_group_construct`]; `cb` is called once on the library's completion
/// thread, with a group valid during the call.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_construct_nb(
    client: *mut cohort_client,
    id: *const c_char,
    procs: *const cohort_proc_t,
    nprocs: usize,
    opts: *const cohort_construct_opts_t,
    cb: cohort_group_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let id = text(id, "the group id")?;
        let procs = procs_in(procs, nprocs)?;
        let opts = construct_opts(opts)?;
        let fut = c.client.group_construct_async(id, &procs, opts);
        complete_group(async move { fut.await.map(Some) }, cb, CbData(cbdata));
        Ok(())
    })
}

/// The non-blocking join, which an event handler may call (the blocking one must not
/// be called from a handler: the answer would wait for the handler to return).
///
/// # Safety
/// As [`cohort_group_join`]; `cb` is called once on the library's completion thread,
/// with the group (NULL after a decline) valid during the call.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_join_nb(
    client: *mut cohort_client,
    id: *const c_char,
    leader: *const cohort_proc_t,
    accept: c_int,
    info: *const cohort_info_t,
    ninfo: usize,
    timeout_ms: c_int,
    cb: cohort_group_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let id = text(id, "the group id")?;
        let leader = one_proc(leader, "the leader")?;
        let info = info_in(info, ninfo)?;
        let fut = c
            .client
            .group_join_async(id, &leader, accept != 0, timeout(timeout_ms), info);
        complete_group(fut, cb, CbData(cbdata));
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `id` a string; `cb` is called once on the library's
/// completion thread.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_destruct_nb(
    client: *mut cohort_client,
    id: *const c_char,
    timeout_ms: c_int,
    cb: cohort_op_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let id = text(id, "the group id")?;
        let fut = c.client.group_destruct_async(id, timeout(timeout_ms));
        complete_op(fut, cb, CbData(cbdata));
        Ok(())
    })
}

/// # Safety
/// As [`cohort_group_invite`]; `cb` is called once on the library's completion
/// thread, with the group (NULL on failure) valid during the call.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_invite_nb(
    client: *mut cohort_client,
    id: *const c_char,
    procs: *const cohort_proc_t,
    nprocs: usize,
    opts: *const cohort_invite_opts_t,
    cb: cohort_group_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let id = text(id, "the group id")?;
        let procs = procs_in(procs, nprocs)?;
        let opts = invite_opts(opts)?;
        let fut = c.client.group_invite_async(id, &procs, opts);
        complete_group(async move { fut.await.map(Some) }, cb, CbData(cbdata));
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `id` a string; `cb` is called once on the library's
/// completion thread.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_leave_nb(
    client: *mut cohort_client,
    id: *const c_char,
    cb: cohort_op_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let fut = c.client.group_leave_async(text(id, "the group id")?);
        complete_op(fut, cb, CbData(cbdata));
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `nspace` a string; `cb` is called once on the library's
/// completion thread.
#[no_mangle]
pub unsafe extern "C" fn cohort_disconnect_nb(
    client: *mut cohort_client,
    nspace: *const c_char,
    timeout_ms: c_int,
    cb: cohort_op_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let opts = disconnect_opts(timeout_ms);
        let fut = c.client.disconnect_async(text(nspace, "the nspace")?, opts);
        complete_op(fut, cb, CbData(cbdata));
        Ok(())
    })
}

/// # Safety
/// As [`cohort_group_failed_global`]; `cb` is called once on the library's completion
/// thread, with the view (NULL on failure) valid during the call.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_failed_global_nb(
    client: *mut cohort_client,
    id: *const c_char,
    timeout_ms: c_int,
    cb: cohort_failed_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let id = text(id, "the group id")?;
        let data = CbData(cbdata);
        complete(
            c.client.group_failed_global_async(id, timeout(timeout_ms)),
            move |r| {
                let data = data;
                let status = code_of(&r);
                let view = r.ok().map(failed_out);
                // SAFETY: the caller's callback, with its own data; the view lives until
                // it returns.
                unsafe { lend(view, cohort_failed_free, |v| cb(status, v, data.0)) }
            },
        );
        Ok(())
    })
}

/// # Safety
/// As [`cohort_connect`]; `cb` is called once on the library's completion thread, with
/// the new nspace ("" with xchg_only or on failure) valid during the call.
#[no_mangle]
pub unsafe extern "C" fn cohort_connect_nb(
    client: *mut cohort_client,
    procs: *const cohort_proc_t,
    nprocs: usize,
    opts: *const cohort_connect_opts_t,
    cb: cohort_connect_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let procs = procs_in(procs, nprocs)?;
        let opts = connect_opts(opts)?;
        let data = CbData(cbdata);
        complete(c.client.connect_procs_async(&procs, opts), move |r| {
            let data = data;
            let status = code_of(&r);
            let (nspace, rank) = match r {
                Ok(conn) => (
                    conn.nspace.unwrap_or_default(),
                    conn.rank.unwrap_or(u32::MAX),
                ),
                Err(_) => (String::new(), u32::MAX),
            };
            let nspace = CString::new(nspace).unwrap_or_default();
            // SAFETY: the caller's callback, with its own data.
            unsafe { cb(status, nspace.as_ptr(), rank, data.0) }
        });
        Ok(())
    })
}

/// # Safety
/// As [`cohort_get`]; `cb` is called once on the library's completion thread, with the
/// value (NULL on failure) valid during the call.
#[no_mangle]
pub unsafe extern "C" fn cohort_get_nb(
    client: *mut cohort_client,
    proc: *const cohort_proc_t,
    key: *const c_char,
    timeout_ms: c_int,
    cb: cohort_value_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let p = one_proc(proc, "the process")?;
        let key = text(key, "the key")?;
        let data = CbData(cbdata);
        complete(c.client.get_async(&p, key, timeout(timeout_ms)), move |r| {
            let data = data;
            let status = code_of(&r);
            let value = r.ok().map(value_out);
            // SAFETY: the caller's callback, with its own data; the value lives
            // until it returns.
            unsafe { lend(value, cohort_value_free, |v| cb(status, v, data.0)) }
        });
        Ok(())
    })
}

/// # Safety
/// `group` is NULL or was filled by [`cohort_group_construct`] and not released.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_free(group: *mut cohort_group_t) {
    let Some(g) = group.as_mut() else { return };
    take_procs(&mut g.members, &mut g.nmembers);
    take_procs(&mut g.failed, &mut g.nfailed);
    free_group_info(
        std::mem::replace(&mut g.info, std::ptr::null_mut()),
        std::mem::take(&mut g.ninfo),
    );
}

/// # Safety
/// `client` is a live handle; `id` a string.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_destruct(
    client: *mut cohort_client,
    id: *const c_char,
    timeout_ms: c_int,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let id = text(id, "the group id")?;
        c.client
            .group_destruct(id, timeout(timeout_ms))
            .map_err(fail)
    })
}

/// # Safety
/// `client` is a live handle; `id` a string.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_destruct_ft(
    client: *mut cohort_client,
    id: *const c_char,
    timeout_ms: c_int,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let id = text(id, "the group id")?;
        c.client
            .group_destruct_tolerant(id, timeout(timeout_ms))
            .map_err(fail)
    })
}

/// # Safety
/// `client` is a live handle; `id` a string.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_leave(
    client: *mut cohort_client,
    id: *const c_char,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        c.client
            .group_leave(text(id, "the group id")?)
            .map_err(fail)
    })
}

/// A failure view handed to C, released by [`cohort_failed_free`].
fn failed_out(view: FailedMembers) -> cohort_failed_t {
    let (failed, nfailed) = procs_out(&view.failed);
    let (fresh, nfresh) = procs_out(&view.new);
    cohort_failed_t {
        failed,
        nfailed,
        fresh,
        nfresh,
    }
}

/// # Safety
/// `client` is a live handle; `id` a string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_failed_local(
    client: *mut cohort_client,
    id: *const c_char,
    out: *mut cohort_failed_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let id = text(id, "the group id")?;
        if out.is_null() {
            return Err(bad_param("the result's address is NULL"));
        }
        out.write(failed_out(c.client.group_failed_local(id).map_err(fail)?));
        Ok(())
    })
}

/// # Safety
/// `client` is a live handle; `id` a string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_group_failed_global(
    client: *mut cohort_client,
    id: *const c_char,
    timeout_ms: c_int,
    out: *mut cohort_failed_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let id = text(id, "the group id")?;
        if out.is_null() {
            return Err(bad_param("the result's address is NULL"));
        }
        let view = c
            .client
            .group_failed_global(id, timeout(timeout_ms))
            .map_err(fail)?;
        out.write(failed_out(view));
        Ok(())
    })
}

/// # Safety
/// `failed` is NULL or was filled by a failure view and not released.
#[no_mangle]
pub unsafe extern "C" fn cohort_failed_free(failed: *mut cohort_failed_t) {
    let Some(f) = failed.as_mut() else { return };
    take_procs(&mut f.failed, &mut f.nfailed);
    take_procs(&mut f.fresh, &mut f.nfresh);
}

/// The C side's callback data, sent to the event thread.
struct CbData(*mut c_void);
// SAFETY: the caller of `cohort_register_event_handler` hands `cbdata` to the event
// thread by registering it (the header says where the handler runs).
unsafe impl Send for CbData {}
unsafe impl Sync for CbData {}

/// Registers `deliver` for events whose code is in `(codes, ncodes)` (none: every
/// code) and writes the handler's id to `id`. `deliver` gets the event as C sees it,
/// valid during the call.
///
/// # Safety
/// `client` is a live handle; `codes` points to `ncodes` codes; `id` writable.
unsafe fn register(
    client: *mut cohort_client,
    codes: *const c_int,
    ncodes: usize,
    id: *mut u64,
    deliver: impl Fn(&cohort_event_t) + Send + Sync + 'static,
) -> Result<(), c_int> {
    let c = handle(client)?;
    if id.is_null() || (codes.is_null() && ncodes > 0) {
        return Err(bad_param("the codes or the id's address is NULL"));
    }
    let codes: Option<Vec<i32>> =
        (ncodes > 0).then(|| std::slice::from_raw_parts(codes, ncodes).to_vec());
    let handler = move |_: &Client, e: &Event| {
        let affected: Vec<cohort_proc_t> = e.affected.iter().map(proc_out).collect();
        let group = cohort::info_get(&e.info, cohort::keys::GROUP_ID)
            .and_then(|v| v.as_str())
            .and_then(|g| CString::new(g).ok());
        let (info, ninfo) = info_out(&e.info);
        deliver(&cohort_event_t {
            code: e.code,
            source: proc_out(&e.source),
            affected: affected.as_ptr(),
            naffected: affected.len(),
            group: group.as_ref().map_or(std::ptr::null(), |g| g.as_ptr()),
            info,
            ninfo,
        });
        // SAFETY: the list was made above and the handler has returned.
        unsafe { info::free_info(info, ninfo) };
    };
    let hid = c.client.register_event_handler(codes.as_deref(), handler);
    let mut h = c.handlers.lock().unwrap_or_else(|p| p.into_inner());
    h.0 += 1;
    let n = h.0;
    h.1.insert(n, hid);
    id.write(n);
    Ok(())
}

/// # Safety
/// `client` is a live handle; `codes` points to `ncodes` codes; `id` writable; `cb`
/// may be called on the client's event thread with `cbdata` until deregistered.
#[no_mangle]
pub unsafe extern "C" fn cohort_register_event_handler(
    client: *mut cohort_client,
    codes: *const c_int,
    ncodes: usize,
    cb: cohort_event_fn,
    cbdata: *mut c_void,
    id: *mut u64,
) -> c_int {
    let Some(cb) = cb else {
        return bad_param("the handler is NULL");
    };
    let data = CbData(cbdata);
    status(|| {
        register(client, codes, ncodes, id, move |e| {
            let data = &data;
            // SAFETY: the registrant promised `cb` accepts these for the call's length.
            unsafe { cb(e.code, &e.source, e.affected, e.naffected, e.group, data.0) }
        })
    })
}

/// The same as [`cohort_register_event_handler`], with the whole event (its info too).
///
/// # Safety
/// As [`cohort_register_event_handler`].
#[no_mangle]
pub unsafe extern "C" fn cohort_register_event_callback(
    client: *mut cohort_client,
    codes: *const c_int,
    ncodes: usize,
    cb: cohort_event_cb,
    cbdata: *mut c_void,
    id: *mut u64,
) -> c_int {
    let Some(cb) = cb else {
        return bad_param("the handler is NULL");
    };
    let data = CbData(cbdata);
    status(|| {
        register(client, codes, ncodes, id, move |e| {
            let data = &data;
            // SAFETY: the registrant promised `cb` accepts the event for the call.
            unsafe { cb(e, data.0) }
        })
    })
}

/// # Safety
/// `client` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn cohort_deregister_event_handler(
    client: *mut cohort_client,
    id: u64,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let hid = c
            .handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .remove(&id)
            .ok_or_else(|| bad_param(format!("no event handler {id}")))?;
        c.client.deregister_event_handler(hid);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `#define` of the header that has a constant here has its value.
    #[test]
    fn the_header_defines_the_values_of_this_crate() {
        let header = include_str!("../include/cohort.h");
        let defined: HashMap<&str, i64> = header
            .lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("#define ")?.split_whitespace();
                Some((w.next()?, w.next()?.parse().ok()?))
            })
            .collect();
        assert_eq!(
            defined.get("COHORT_MAX_NSLEN"),
            Some(&(COHORT_MAX_NSLEN as i64))
        );
        for &(name, value) in STATUSES.iter().chain(OTHER_CONSTANTS) {
            let name = name.trim_end_matches('\0');
            assert_eq!(defined.get(name), Some(&i64::from(value)), "{name}");
        }
        use cohort::codes;
        let events: &[(&str, i32)] = &[
            ("GROUP_INVITED", codes::GROUP_INVITED),
            ("GROUP_LEFT", codes::GROUP_LEFT),
            ("GROUP_INVITE_ACCEPTED", codes::GROUP_INVITE_ACCEPTED),
            ("GROUP_INVITE_DECLINED", codes::GROUP_INVITE_DECLINED),
            ("GROUP_INVITE_FAILED", codes::GROUP_INVITE_FAILED),
            ("GROUP_MEMBERSHIP_UPDATE", codes::GROUP_MEMBERSHIP_UPDATE),
            ("GROUP_CONSTRUCT_ABORT", codes::GROUP_CONSTRUCT_ABORT),
            ("GROUP_CONSTRUCT_COMPLETE", codes::GROUP_CONSTRUCT_COMPLETE),
            ("GROUP_LEADER_SELECTED", codes::GROUP_LEADER_SELECTED),
            ("GROUP_LEADER_FAILED", codes::GROUP_LEADER_FAILED),
            (
                "GROUP_CONTEXT_ID_ASSIGNED",
                codes::GROUP_CONTEXT_ID_ASSIGNED,
            ),
            ("GROUP_MEMBER_FAILED", codes::GROUP_MEMBER_FAILED),
            ("PROC_HAS_CONNECTED", codes::PROC_HAS_CONNECTED),
            ("PROC_HAS_DISCONNECTED", codes::PROC_HAS_DISCONNECTED),
            ("PROC_TERMINATED", codes::PROC_TERMINATED),
            ("LOST_CONNECTION", codes::LOST_CONNECTION),
            ("JOB_END", codes::JOB_END),
            ("PROCESS_SET_DEFINE", codes::PROCESS_SET_DEFINE),
            ("PROCESS_SET_DELETE", codes::PROCESS_SET_DELETE),
        ];
        for (name, value) in events {
            let name = format!("COHORT_EVENT_{name}");
            assert_eq!(
                defined.get(name.as_str()),
                Some(&i64::from(*value)),
                "{name}"
            );
        }
        // Every status the header names has a name here.
        for (name, value) in defined.iter().filter(|(n, _)| n.starts_with("COHORT_ERR_")) {
            let named = unsafe { CStr::from_ptr(cohort_status_name(*value as c_int)) };
            assert_eq!(named.to_str().unwrap(), *name);
        }
    }

    #[test]
    fn every_error_maps_to_the_status_its_kind_names() {
        let p = ProcId::new("job", 1);
        let cases = [
            (
                CohortError::GroupNotFound { id: "g".into() },
                COHORT_ERR_GROUP_NOT_FOUND,
            ),
            (
                CohortError::Timeout {
                    op: "fence".into(),
                    timeout_ms: 5,
                    missing: vec![p.clone()],
                },
                COHORT_ERR_TIMEOUT,
            ),
            (
                CohortError::ProcTerminated {
                    op: "fence".into(),
                    procs: vec![p.clone()],
                },
                COHORT_ERR_PROC_TERMINATED,
            ),
            (
                CohortError::NotAMember {
                    id: "g".into(),
                    proc: p,
                },
                COHORT_ERR_NOT_A_MEMBER,
            ),
        ];
        for (e, s) in cases {
            let message = e.to_string();
            assert_eq!(fail(e), s);
            let last = unsafe { CStr::from_ptr(cohort_last_error()) };
            assert_eq!(last.to_str().unwrap(), message);
        }
    }

    #[test]
    fn processes_cross_the_boundary_unchanged_and_long_names_are_refused() {
        let p = ProcId::new("job.7", 3);
        let c = proc_out(&p);
        assert_eq!(proc_in(&c).unwrap(), p);
        let (list, n) = procs_out(&[p.clone(), ProcId::new("other", 0)]);
        let back = unsafe { procs_in(list, n) }.unwrap();
        unsafe { free_procs(list, n) };
        assert_eq!(back, vec![p, ProcId::new("other", 0)]);
        let unterminated = cohort_proc_t {
            nspace: [b'x' as c_char; COHORT_MAX_NSLEN + 1],
            rank: 0,
        };
        assert_eq!(proc_in(&unterminated), Err(COHORT_ERR_BAD_PARAM));
        assert_eq!(
            unsafe { procs_in(std::ptr::null(), 2) },
            Err(COHORT_ERR_BAD_PARAM)
        );
    }
}
