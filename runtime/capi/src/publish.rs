//! Publish / lookup / unpublish (PMIx_Publish, PMIx_Lookup, PMIx_Unpublish) through
//! the C interface, on the job's data store.

use std::ffi::{c_char, c_int, c_void, CString};

use cohort::{DataRange, LookupOpts, Persistence, Published};

use crate::info::{c_string, info_in};
use crate::{
    bad_param, cohort_client, cohort_info_t, cohort_proc_t, cohort_value_free, cohort_value_t,
    complete, complete_op, fail, handle, lend, proc_out, procs_in, status, text, value_out, CbData,
    COHORT_DATA_RANGE_CUSTOM, COHORT_DATA_RANGE_GLOBAL, COHORT_DATA_RANGE_LOCAL,
    COHORT_DATA_RANGE_NAMESPACE, COHORT_DATA_RANGE_PROC_LOCAL, COHORT_DATA_RANGE_SESSION,
    COHORT_PERSIST_APP, COHORT_PERSIST_FIRST_READ, COHORT_PERSIST_INDEF, COHORT_PERSIST_PROC,
    COHORT_PERSIST_SESSION, COHORT_WAIT_ALL,
};

/// Where published data is visible and how long it stays (zero-initialized:
/// session range, the application's persistence).
#[repr(C)]
pub struct cohort_publish_opts_t {
    pub range: c_int,
    /// COHORT_DATA_RANGE_CUSTOM: its processes.
    pub procs: *const cohort_proc_t,
    pub nprocs: usize,
    pub persistence: c_int,
}

/// Directives of a lookup (zero-initialized: session range, no waiting).
#[repr(C)]
pub struct cohort_lookup_opts_t {
    pub range: c_int,
    pub procs: *const cohort_proc_t,
    pub nprocs: usize,
    /// 0: answer at once; N > 0: once N of the keys are published; COHORT_WAIT_ALL:
    /// once all are.
    pub wait: c_int,
    /// For a waiting lookup; <= 0: none.
    pub timeout_ms: c_int,
}

/// A value a lookup found (PMIx's pmix_pdata_t).
#[repr(C)]
pub struct cohort_published_t {
    pub key: *mut c_char,
    pub publisher: cohort_proc_t,
    pub value: cohort_value_t,
}

pub type cohort_lookup_cb = Option<
    unsafe extern "C" fn(
        status: c_int,
        found: *const cohort_published_t,
        nfound: usize,
        cbdata: *mut c_void,
    ),
>;

/// # Safety
/// `procs` points to `nprocs` processes where `range` is custom.
unsafe fn range_in(
    range: c_int,
    procs: *const cohort_proc_t,
    nprocs: usize,
) -> Result<DataRange, c_int> {
    Ok(match range {
        COHORT_DATA_RANGE_SESSION => DataRange::Session,
        COHORT_DATA_RANGE_NAMESPACE => DataRange::Namespace,
        COHORT_DATA_RANGE_LOCAL => DataRange::Local,
        COHORT_DATA_RANGE_PROC_LOCAL => DataRange::ProcLocal,
        COHORT_DATA_RANGE_GLOBAL => DataRange::Global,
        COHORT_DATA_RANGE_CUSTOM => DataRange::Custom(procs_in(procs, nprocs)?),
        other => return Err(bad_param(format!("unknown data range {other}"))),
    })
}

/// # Safety
/// `opts` NULL or valid options.
unsafe fn publish_opts(
    opts: *const cohort_publish_opts_t,
) -> Result<(DataRange, Persistence), c_int> {
    let Some(o) = opts.as_ref() else {
        return Ok((DataRange::Session, Persistence::App));
    };
    let persistence = match o.persistence {
        COHORT_PERSIST_APP => Persistence::App,
        COHORT_PERSIST_INDEF => Persistence::Indefinite,
        COHORT_PERSIST_FIRST_READ => Persistence::FirstRead,
        COHORT_PERSIST_PROC => Persistence::Proc,
        COHORT_PERSIST_SESSION => Persistence::Session,
        other => return Err(bad_param(format!("unknown persistence {other}"))),
    };
    Ok((range_in(o.range, o.procs, o.nprocs)?, persistence))
}

/// # Safety
/// `opts` NULL or valid options.
unsafe fn lookup_opts(opts: *const cohort_lookup_opts_t) -> Result<LookupOpts, c_int> {
    let Some(o) = opts.as_ref() else {
        return Ok(LookupOpts::default());
    };
    let wait = match o.wait {
        0 => None,
        COHORT_WAIT_ALL => Some(0),
        n if n > 0 => Some(n as u32),
        other => {
            return Err(bad_param(format!(
                "wait {other}: 0, a count or COHORT_WAIT_ALL"
            )))
        }
    };
    Ok(LookupOpts {
        range: range_in(o.range, o.procs, o.nprocs)?,
        wait,
        timeout_ms: crate::timeout_ms(o.timeout_ms),
    })
}

/// # Safety
/// `keys` points to `n` strings (NULL with 0: none).
unsafe fn keys_in(keys: *const *const c_char, n: usize) -> Result<Vec<String>, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if keys.is_null() {
        return Err(bad_param(format!("a list of {n} keys is NULL")));
    }
    std::slice::from_raw_parts(keys, n)
        .iter()
        .map(|&k| text(k, "a key").map(str::to_string))
        .collect()
}

/// Borrowed keys, as the client takes them.
fn strs(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

/// The keys (`None`: all of the caller's) and range of an unpublish.
///
/// # Safety
/// As `cohort_unpublish`.
unsafe fn unpublish_args(
    keys: *const *const c_char,
    nkeys: usize,
    opts: *const cohort_publish_opts_t,
) -> Result<(Option<Vec<String>>, DataRange), c_int> {
    let (range, _) = publish_opts(opts)?;
    let keys = (!keys.is_null() || nkeys > 0)
        .then(|| keys_in(keys, nkeys))
        .transpose()?;
    Ok((keys, range))
}

fn found_out(found: Vec<Published>) -> (*mut cohort_published_t, usize) {
    if found.is_empty() {
        return (std::ptr::null_mut(), 0);
    }
    let list: Box<[cohort_published_t]> = found
        .into_iter()
        .map(|f| cohort_published_t {
            key: c_string(&f.key),
            publisher: proc_out(&f.publisher),
            value: value_out(f.value),
        })
        .collect();
    let n = list.len();
    (Box::into_raw(list).cast(), n)
}

/// # Safety
/// `client` a live handle; `data` points to `ndata` entries; `opts` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cohort_publish(
    client: *mut cohort_client,
    data: *const cohort_info_t,
    ndata: usize,
    opts: *const cohort_publish_opts_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let (range, persistence) = publish_opts(opts)?;
        let data = info_in(data, ndata)?;
        c.client.publish(data, range, persistence).map_err(fail)
    })
}

/// # Safety
/// As `cohort_publish`; `cb` is called once on the completion thread with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn cohort_publish_nb(
    client: *mut cohort_client,
    data: *const cohort_info_t,
    ndata: usize,
    opts: *const cohort_publish_opts_t,
    cb: Option<unsafe extern "C" fn(c_int, *mut c_void)>,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let (range, persistence) = publish_opts(opts)?;
        let data = info_in(data, ndata)?;
        let fut = c.client.publish_async(data, range, persistence);
        complete_op(fut, cb, CbData(cbdata));
        Ok(())
    })
}

/// # Safety
/// `client` a live handle; `keys` points to `nkeys` strings; `opts` NULL or valid;
/// `found` and `nfound` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_lookup(
    client: *mut cohort_client,
    keys: *const *const c_char,
    nkeys: usize,
    opts: *const cohort_lookup_opts_t,
    found: *mut *mut cohort_published_t,
    nfound: *mut usize,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        if found.is_null() || nfound.is_null() {
            return Err(bad_param("an address for the result is NULL"));
        }
        let keys = keys_in(keys, nkeys)?;
        let refs = strs(&keys);
        let v = c.client.lookup(&refs, lookup_opts(opts)?).map_err(fail)?;
        let (p, n) = found_out(v);
        found.write(p);
        nfound.write(n);
        Ok(())
    })
}

/// # Safety
/// As `cohort_lookup`; `cb` is called once on the completion thread with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn cohort_lookup_nb(
    client: *mut cohort_client,
    keys: *const *const c_char,
    nkeys: usize,
    opts: *const cohort_lookup_opts_t,
    cb: cohort_lookup_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let keys = keys_in(keys, nkeys)?;
        let refs = strs(&keys);
        let fut = c.client.lookup_async(&refs, lookup_opts(opts)?);
        let data = CbData(cbdata);
        complete(fut, move |r| {
            let data = data;
            let (st, list) = match r {
                Ok(v) => (crate::COHORT_SUCCESS, found_out(v)),
                Err(st) => (st, (std::ptr::null_mut(), 0)),
            };
            // SAFETY: the caller's callback, with its own data; the list lives until
            // it returns.
            unsafe {
                lend(Some(list), free_pair, |l| cb(st, (*l).0, (*l).1, data.0));
            }
        });
        Ok(())
    })
}

unsafe extern "C" fn free_pair(l: *mut (*mut cohort_published_t, usize)) {
    if let Some(&mut (p, n)) = l.as_mut() {
        cohort_published_free(p, n);
    }
}

/// # Safety
/// `found` NULL or a list from `cohort_lookup` of `n` entries, not released.
#[no_mangle]
pub unsafe extern "C" fn cohort_published_free(found: *mut cohort_published_t, n: usize) {
    if found.is_null() {
        return;
    }
    let mut list = Box::from_raw(std::ptr::slice_from_raw_parts_mut(found, n));
    for f in list.iter_mut() {
        if !f.key.is_null() {
            drop(CString::from_raw(f.key));
        }
        cohort_value_free(&mut f.value);
    }
}

/// # Safety
/// `client` a live handle; `keys` points to `nkeys` strings (NULL, 0: all of this
/// process's); `opts` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cohort_unpublish(
    client: *mut cohort_client,
    keys: *const *const c_char,
    nkeys: usize,
    opts: *const cohort_publish_opts_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let (keys, range) = unpublish_args(keys, nkeys, opts)?;
        let refs = keys.as_ref().map(|ks| strs(ks));
        c.client.unpublish(refs.as_deref(), range).map_err(fail)
    })
}

/// # Safety
/// As `cohort_unpublish`; `cb` is called once on the completion thread with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn cohort_unpublish_nb(
    client: *mut cohort_client,
    keys: *const *const c_char,
    nkeys: usize,
    opts: *const cohort_publish_opts_t,
    cb: Option<unsafe extern "C" fn(c_int, *mut c_void)>,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let (keys, range) = unpublish_args(keys, nkeys, opts)?;
        let refs = keys.as_ref().map(|ks| strs(ks));
        let fut = c.client.unpublish_async(refs.as_deref(), range);
        complete_op(fut, cb, CbData(cbdata));
        Ok(())
    })
}
