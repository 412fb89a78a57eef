//! `PMIx_Job_control` and `PMIx_Log`, as far as a cohort rank needs them: Open MPI
//! registers its session directories for cleanup and logs its error messages through
//! them during MPI_Init.
//!
//! * Job control accepts cleanup registrations (PMIX_REGISTER_CLEANUP,
//!   PMIX_REGISTER_CLEANUP_DIR and their modifiers) and does nothing with them: cohort
//!   keeps no per-job files of the application's, and Open MPI removes its own session
//!   directory at finalize. Any other directive (kill, signal, checkpoint, …) is
//!   PMIX_ERR_NOT_SUPPORTED.
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

/// # Safety
/// `directives` NULL or `ndirs` infos.
unsafe fn job_control(directives: *const pmix_info_t, ndirs: usize) -> Result<(), pmix_status_t> {
    state()?;
    // SAFETY: forwarded contract.
    let dirs = unsafe { infos(directives, ndirs) };
    if !dirs.is_empty() && dirs.iter().all(|(k, _)| CLEANUP_KEYS.contains(&k.as_str())) {
        return Ok(());
    }
    debug(|| format!("PMIx_Job_control {dirs:?}: not supported"));
    Err(PMIX_ERR_NOT_SUPPORTED)
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
