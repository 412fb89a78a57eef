//! `PMIx_Job_control` and `PMIx_Log`, as far as a cohort rank needs them: Open MPI
//! registers its session directories for cleanup and logs its error messages through
//! them during MPI_Init.
//!
//! * Job control takes cleanup registrations (PMIX_REGISTER_CLEANUP,
//!   PMIX_REGISTER_CLEANUP_DIR with PMIX_CLEANUP_RECURSIVE; other cleanup modifiers are
//!   accepted and ignored) and removes those paths at finalize ([`clean_up`]): Open MPI
//!   leaves its session directory to the resource manager. Any other directive (kill,
//!   signal, checkpoint, …) is PMIX_ERR_NOT_SUPPORTED.
//! * Log writes PMIX_LOG_STDERR and PMIX_LOG_STDOUT entries to this process's stderr
//!   and stdout (which `cohort run` forwards); other channels are not supported.

use std::ffi::c_void;
use std::io::Write;

use crate::types::*;
use crate::value::PVal;
use crate::*;

const CLEANUP_KEYS: &[&str] = &[
    "pmix.reg.cleanup",
    "pmix.reg.cleanupdir",
    "pmix.clnup.recurse",
    "pmix.clnup.empty",
    "pmix.clnup.ignore",
    "pmix.clnup.lvtop",
];
const LOG_STDERR: &str = "pmix.log.stderr";
const LOG_STDOUT: &str = "pmix.log.stdout";

/// A path registered for cleanup.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Cleanup {
    pub path: std::path::PathBuf,
    pub dir: bool,
    pub recursive: bool,
}

/// # Safety
/// `directives` NULL or `ndirs` infos.
unsafe fn job_control(directives: *const pmix_info_t, ndirs: usize) -> Result<(), pmix_status_t> {
    let s = state()?;
    // SAFETY: forwarded contract.
    let dirs = unsafe { infos(directives, ndirs) };
    debug(|| format!("PMIx_Job_control {dirs:?}"));
    if dirs.is_empty() || !dirs.iter().all(|(k, _)| CLEANUP_KEYS.contains(&k.as_str())) {
        return Err(PMIX_ERR_NOT_SUPPORTED);
    }
    let recursive = flag(&dirs, "pmix.clnup.recurse");
    let mut list = lock(&s.cleanup);
    for (k, v) in &dirs {
        let (PVal::Str(path), dir) = (v, k == "pmix.reg.cleanupdir") else {
            continue;
        };
        if k != "pmix.reg.cleanup" && !dir {
            continue;
        }
        let c = Cleanup {
            path: path.into(),
            dir,
            recursive: dir && recursive,
        };
        if !list.contains(&c) {
            list.push(c);
        }
    }
    Ok(())
}

/// Removes the paths registered for cleanup (and a removed directory's parent when it
/// is left empty), as a resource manager would once the job is done: at this process's last `PMIx_Finalize`, after a fence of the job (up to
/// 10 s) shows every rank is finalizing too. A failed fence leaves them in place.
/// Errors (another rank removed a path first) are ignored.
pub(crate) fn clean_up(s: &State) {
    let list = std::mem::take(&mut *lock(&s.cleanup));
    if list.is_empty() {
        return;
    }
    let fence = FenceOpts {
        collect: false,
        timeout_ms: Some(10_000),
        ft_collective: false,
    };
    if let Err(e) = s.client.fence(&[], fence) {
        debug(|| format!("cleanup skipped: the finalize fence failed: {e}"));
        return;
    }
    for c in list {
        let r = match (c.dir, c.recursive) {
            (false, _) => std::fs::remove_file(&c.path),
            (true, true) => std::fs::remove_dir_all(&c.path),
            (true, false) => std::fs::remove_dir(&c.path),
        };
        debug(|| format!("cleanup of {}: {r:?}", c.path.display()));
        // A directory's parent goes too once empty (Open MPI registers
        // `<session>/jf.<family>/<job>`, and the family directory is this job's).
        if c.dir && r.is_ok() {
            if let Some(parent) = c.path.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

/// # Safety
/// `targets` NULL or `ntargets` processes; `directives` NULL or `ndirs` infos;
/// `results`, `nresults` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Job_control(
    _targets: *const pmix_proc_t,
    _ntargets: usize,
    directives: *const pmix_info_t,
    ndirs: usize,
    results: *mut *mut pmix_info_t,
    nresults: *mut usize,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: forwarded contract.
        unsafe { job_control(directives, ndirs) }?;
        // SAFETY: NULL checked; writable per the contract.
        unsafe {
            if !results.is_null() && !nresults.is_null() {
                results.write(std::ptr::null_mut());
                nresults.write(0);
            }
        }
        Ok(())
    })
}

/// As `PMIx_Job_control`; `cbfunc` gets the status (and no results) on the
/// completion thread.
///
/// # Safety
/// As `PMIx_Job_control`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Job_control_nb(
    _targets: *const pmix_proc_t,
    _ntargets: usize,
    directives: *const pmix_info_t,
    ndirs: usize,
    cbfunc: pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: forwarded contract.
        unsafe { job_control(directives, ndirs) }?;
        let data = CbData(cbdata);
        complete(std::future::ready(()), move |()| {
            let data = data;
            if let Some(cb) = cbfunc {
                // SAFETY: the caller's callback, once, with its data.
                unsafe {
                    cb(
                        PMIX_SUCCESS,
                        std::ptr::null_mut(),
                        0,
                        data.0,
                        None,
                        std::ptr::null_mut(),
                    )
                };
            }
        })
    })
}

/// # Safety
/// `data` NULL or `ndata` infos.
unsafe fn log(data: *const pmix_info_t, ndata: usize) -> Result<(), pmix_status_t> {
    state()?;
    // SAFETY: forwarded contract.
    let items = unsafe { infos(data, ndata) };
    let mut done = false;
    for (k, v) in &items {
        let PVal::Str(text) = v else { continue };
        let line = if text.ends_with('\n') {
            text.clone()
        } else {
            format!("{text}\n")
        };
        match k.as_str() {
            LOG_STDERR => {
                let _ = std::io::stderr().write_all(line.as_bytes());
                done = true;
            }
            LOG_STDOUT => {
                let _ = std::io::stdout().write_all(line.as_bytes());
                let _ = std::io::stdout().flush();
                done = true;
            }
            _ => {}
        }
    }
    if done {
        Ok(())
    } else {
        Err(PMIX_ERR_NOT_SUPPORTED)
    }
}

/// Writes PMIX_LOG_STDERR / PMIX_LOG_STDOUT entries of `data`.
///
/// # Safety
/// `data` NULL or `ndata` infos; `directives` NULL or `ndirs` infos.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Log(
    data: *const pmix_info_t,
    ndata: usize,
    _directives: *const pmix_info_t,
    _ndirs: usize,
) -> pmix_status_t {
    // SAFETY: forwarded contract.
    guard(|| unsafe { log(data, ndata) })
}

/// As `PMIx_Log`; `cbfunc` gets the status on the completion thread.
///
/// # Safety
/// As `PMIx_Log`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Log_nb(
    data: *const pmix_info_t,
    ndata: usize,
    _directives: *const pmix_info_t,
    _ndirs: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: forwarded contract.
        unsafe { log(data, ndata) }?;
        op_callback(cbfunc, CbData(cbdata), std::future::ready(PMIX_SUCCESS))
    })
}
