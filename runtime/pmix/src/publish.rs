//! PMIx_Publish, PMIx_Lookup and PMIx_Unpublish (and their `_nb` forms) on cohort's
//! data store: what MPI_Publish_name / MPI_Lookup_name and Open MPI's
//! MPI_Comm_accept / MPI_Comm_connect use.
//!
//! Publish treats every info as data except the standard directives it reads
//! (PMIX_RANGE, PMIX_PERSISTENCE, PMIX_TIMEOUT) and the access-control ones, which a
//! cohort job (one user) does not need and which are not published either.
//! PMIX_RANGE_RM and PMIX_RANGE_CUSTOM are not supported (the standard names no
//! attribute that lists a custom range's processes for publish).

use std::ffi::{c_char, c_void};

use cohort::{DataRange, LookupOpts, Persistence, Published};

use crate::types::*;
use crate::value::*;
use crate::*;

/// Directives of publish that are never data.
const DIRECTIVES: &[&str] = &[
    PMIX_RANGE,
    PMIX_PERSISTENCE,
    PMIX_TIMEOUT,
    "pmix.aperms",
    "pmix.auids",
    "pmix.agids",
    "pmix.euid",
    "pmix.egid",
];

fn small(v: &PVal) -> Option<u64> {
    match *v {
        PVal::Range(r) | PVal::Persist(r) => Some(r.into()),
        ref other => other.as_u64(),
    }
}

/// PMIX_RANGE (default: session).
fn range_of(info: &[(String, PVal)]) -> Result<DataRange, pmix_status_t> {
    let Some(v) = find(info, PMIX_RANGE) else {
        return Ok(DataRange::Session);
    };
    let r = small(v).ok_or(PMIX_ERR_BAD_PARAM)?;
    Ok(match u32::try_from(r).map_err(|_| PMIX_ERR_BAD_PARAM)? {
        PMIX_RANGE_UNDEF | PMIX_RANGE_SESSION => DataRange::Session,
        PMIX_RANGE_LOCAL => DataRange::Local,
        PMIX_RANGE_NAMESPACE => DataRange::Namespace,
        PMIX_RANGE_GLOBAL => DataRange::Global,
        PMIX_RANGE_PROC_LOCAL => DataRange::ProcLocal,
        PMIX_RANGE_RM | PMIX_RANGE_CUSTOM => return Err(PMIX_ERR_NOT_SUPPORTED),
        _ => return Err(PMIX_ERR_BAD_PARAM),
    })
}

/// PMIX_PERSISTENCE (default: the application's).
fn persistence_of(info: &[(String, PVal)]) -> Result<Persistence, pmix_status_t> {
    let Some(v) = find(info, PMIX_PERSISTENCE) else {
        return Ok(Persistence::App);
    };
    Ok(
        match u32::try_from(small(v).ok_or(PMIX_ERR_BAD_PARAM)?).map_err(|_| PMIX_ERR_BAD_PARAM)? {
            PMIX_PERSIST_INDEF => Persistence::Indefinite,
            PMIX_PERSIST_FIRST_READ => Persistence::FirstRead,
            PMIX_PERSIST_PROC => Persistence::Proc,
            PMIX_PERSIST_APP => Persistence::App,
            PMIX_PERSIST_SESSION => Persistence::Session,
            _ => return Err(PMIX_ERR_BAD_PARAM),
        },
    )
}

/// # Safety
/// `info` NULL or `ninfo` infos.
unsafe fn publish_args(
    info: *const pmix_info_t,
    ninfo: usize,
) -> Result<(cohort::Info, DataRange, Persistence), pmix_status_t> {
    // SAFETY: forwarded contract.
    let info = unsafe { infos(info, ninfo) };
    let range = range_of(&info)?;
    let persistence = persistence_of(&info)?;
    let data: cohort::Info = info
        .iter()
        .filter(|(k, _)| !DIRECTIVES.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), to_cohort(v)))
        .collect();
    debug(|| {
        let keys: Vec<&str> = data.iter().map(|(k, _)| k.as_str()).collect();
        format!("PMIx_Publish {keys:?} in {range:?}, {persistence:?}")
    });
    if data.is_empty() {
        return Err(PMIX_ERR_BAD_PARAM);
    }
    Ok((data, range, persistence))
}

/// Publishes every info that is not a directive, in PMIX_RANGE (session by default)
/// with PMIX_PERSISTENCE (the application's by default). PMIX_ERR_DUPLICATE_KEY when a
/// key is already published in that range; nothing is published then.
///
/// # Safety
/// `info` NULL or `ninfo` infos.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Publish(info: *const pmix_info_t, ninfo: usize) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (data, range, persistence) = unsafe { publish_args(info, ninfo) }?;
        s.client
            .publish(data, range, persistence)
            .map_err(|e| status_of(&e))
    })
}

/// As `PMIx_Publish`; `cbfunc` gets the status on the library's completion thread.
///
/// # Safety
/// As `PMIx_Publish`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Publish_nb(
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (data, range, persistence) = unsafe { publish_args(info, ninfo) }?;
        let fut = s.client.publish_async(data, range, persistence);
        op_callback(cbfunc, CbData(cbdata), status_after(fut))
    })
}

/// PMIX_RANGE, PMIX_WAIT (a count, 0 for all; a boolean true for all) and
/// PMIX_TIMEOUT of a lookup.
fn lookup_opts(info: &[(String, PVal)]) -> Result<LookupOpts, pmix_status_t> {
    let wait = match find(info, PMIX_WAIT) {
        None => None,
        Some(PVal::Bool(b)) => b.then_some(0),
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(PMIX_ERR_BAD_PARAM)?,
        ),
    };
    let opts = LookupOpts {
        range: range_of(info)?,
        wait,
        timeout_ms: timeout(info).map(|d| d.as_millis() as u64),
    };
    debug(|| format!("PMIx_Lookup directives: {opts:?}"));
    Ok(opts)
}

/// The status a lookup of `asked` keys ends with when `found` came back.
fn lookup_status(asked: usize, found: &[Published]) -> pmix_status_t {
    match found.len() {
        0 => PMIX_ERR_NOT_FOUND,
        n if n < asked => PMIX_ERR_PARTIAL_SUCCESS,
        _ => PMIX_SUCCESS,
    }
}

/// Fills `d` (whose key was asked) with what was found for its key, or marks it
/// PMIX_UNDEF.
fn fill(d: &mut pmix_pdata_t, found: &[Published]) {
    let key = key_in(&d.key);
    match found.iter().find(|f| f.key == key) {
        Some(f) => {
            d.proc_ = proc_out(&f.publisher);
            // SAFETY: `d.value` is the caller's value struct, written whole here.
            unsafe { write_value(&from_cohort(&f.value), &mut d.value) };
        }
        None => d.value.type_ = PMIX_UNDEF,
    }
}

/// Looks the keys of `data` up; on return each found entry holds its publisher and
/// value (the caller releases them with PMIX_PDATA_DESTRUCT), the others type
/// PMIX_UNDEF. PMIX_ERR_NOT_FOUND when none was found, PMIX_ERR_PARTIAL_SUCCESS when
/// some were. PMIX_WAIT waits for them (up to PMIX_TIMEOUT).
///
/// # Safety
/// `data` points to `ndata` entries with their keys set; `info` NULL or `ninfo` infos.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Lookup(
    data: *mut pmix_pdata_t,
    ndata: usize,
    info: *const pmix_info_t,
    ninfo: usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        if data.is_null() || ndata == 0 {
            return Err(PMIX_ERR_BAD_PARAM);
        }
        // SAFETY: per the contract.
        let entries = unsafe { std::slice::from_raw_parts_mut(data, ndata) };
        // SAFETY: forwarded contract.
        let opts = lookup_opts(&unsafe { infos(info, ninfo) })?;
        let keys: Vec<String> = entries.iter().map(|d| key_in(&d.key)).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let found = s.client.lookup(&refs, opts).map_err(|e| status_of(&e))?;
        for d in entries.iter_mut() {
            fill(d, &found);
        }
        match lookup_status(keys.len(), &found) {
            PMIX_SUCCESS => Ok(()),
            st => Err(st),
        }
    })
}

/// The keys of a NULL-terminated array (NULL: none).
///
/// # Safety
/// `keys` NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn key_list(keys: *mut *mut c_char) -> Result<Option<Vec<String>>, pmix_status_t> {
    if keys.is_null() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for i in 0.. {
        // SAFETY: NULL-terminated, per the contract.
        let k = unsafe { *keys.add(i) };
        if k.is_null() {
            break;
        }
        // SAFETY: NUL-terminated, per the contract.
        out.push(unsafe { text(k) }?);
    }
    Ok(Some(out))
}

/// As `PMIx_Lookup`, for the NULL-terminated `keys`; `cbfunc` gets the status and the
/// found entries only (NULL and 0 when none) on the library's completion thread; the
/// entries are released when it returns.
///
/// # Safety
/// `keys` a NULL-terminated array of strings; `info` NULL or `ninfo` infos; `cbfunc`
/// may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Lookup_nb(
    keys: *mut *mut c_char,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_lookup_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        let cb = cbfunc.ok_or(PMIX_ERR_BAD_PARAM)?;
        // SAFETY: forwarded contract.
        let keys = unsafe { key_list(keys) }?.ok_or(PMIX_ERR_BAD_PARAM)?;
        // SAFETY: forwarded contract.
        let opts = lookup_opts(&unsafe { infos(info, ninfo) })?;
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let fut = s.client.lookup_async(&refs, opts);
        let asked = keys.len();
        let data = CbData(cbdata);
        complete(fut, move |r| {
            let data = data;
            let found = match r {
                Ok(found) => found,
                // SAFETY: the caller's callback.
                Err(e) => return unsafe { cb(status_of(&e), std::ptr::null_mut(), 0, data.0) },
            };
            let st = lookup_status(asked, &found);
            let arr = calloc::<pmix_pdata_t>(found.len());
            if arr.is_null() {
                // SAFETY: the caller's callback.
                return unsafe { cb(st, std::ptr::null_mut(), 0, data.0) };
            }
            for (i, f) in found.iter().enumerate() {
                // SAFETY: `arr` has `found.len()` zeroed entries.
                let d = unsafe { &mut *arr.add(i) };
                key_out(&f.key, &mut d.key);
                fill(d, &found);
            }
            // SAFETY: the caller's callback, with entries valid during the call; then
            // they are released (values and array, all malloc'd here).
            unsafe {
                cb(st, arr, found.len(), data.0);
                for i in 0..found.len() {
                    destruct_value(&mut (*arr.add(i)).value);
                }
                libc::free(arr.cast());
            }
        })
    })
}

/// Borrowed keys, as the client takes them.
fn strs(keys: &Option<Vec<String>>) -> Option<Vec<&str>> {
    keys.as_ref()
        .map(|ks| ks.iter().map(String::as_str).collect())
}

/// # Safety
/// As `PMIx_Unpublish`.
unsafe fn unpublish_args(
    keys: *mut *mut c_char,
    info: *const pmix_info_t,
    ninfo: usize,
) -> Result<(Option<Vec<String>>, DataRange), pmix_status_t> {
    // SAFETY: forwarded contract.
    let keys = unsafe { key_list(keys) }?;
    // SAFETY: forwarded contract.
    let range = range_of(&unsafe { infos(info, ninfo) })?;
    Ok((keys, range))
}

/// Removes this process's data under `keys` (all of it when `keys` is NULL) in
/// PMIX_RANGE (session by default).
///
/// # Safety
/// `keys` NULL or a NULL-terminated array of strings; `info` NULL or `ninfo` infos.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Unpublish(
    keys: *mut *mut c_char,
    info: *const pmix_info_t,
    ninfo: usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (keys, range) = unsafe { unpublish_args(keys, info, ninfo) }?;
        s.client
            .unpublish(strs(&keys).as_deref(), range)
            .map_err(|e| status_of(&e))
    })
}

/// As `PMIx_Unpublish`; `cbfunc` gets the status on the library's completion thread.
///
/// # Safety
/// As `PMIx_Unpublish`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Unpublish_nb(
    keys: *mut *mut c_char,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (keys, range) = unsafe { unpublish_args(keys, info, ninfo) }?;
        let fut = s.client.unpublish_async(strs(&keys).as_deref(), range);
        op_callback(cbfunc, CbData(cbdata), status_after(fut))
    })
}
