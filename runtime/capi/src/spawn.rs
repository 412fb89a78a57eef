//! Spawn (PMIx_Spawn) and a process's parent (PMIX_PARENT_ID) through the C
//! interface.

use std::ffi::{c_char, c_int, c_void, CString};

use cohort::{Nspace, SpawnApp, SpawnMapping, SpawnOpts};

use crate::{
    bad_param, cohort_client, cohort_proc_t, complete, fail, handle, proc_out, set_error, status,
    text, timeout_ms, CbData, COHORT_ERR_NOT_FOUND, COHORT_MAP_BLOCK, COHORT_MAP_PER_NODE,
    COHORT_MAP_ROUND_ROBIN, COHORT_MAX_NSLEN, COHORT_SUCCESS,
};

/// One application of a spawn (pmix_app_t).
#[repr(C)]
pub struct cohort_spawn_app_t {
    /// The program (`argv[0]`) and its arguments: `argc` strings.
    pub argv: *const *const c_char,
    pub argc: usize,
    pub maxprocs: u32,
    /// `VAR=VAL` entries: `nenv` strings.
    pub env: *const *const c_char,
    pub nenv: usize,
    /// NULL: the caller's working directory (relative: from the caller's).
    pub cwd: *const c_char,
    /// NULL, or a process set these processes form while their job runs
    /// (PMIX_PSET_NAME).
    pub pset: *const c_char,
}

/// Where a spawn's processes go (zero-initialized: block-wise over every node server).
#[repr(C)]
pub struct cohort_spawn_opts_t {
    pub mapping: c_int,
    /// Node server names (`nhosts` strings); none: every live one.
    pub hosts: *const *const c_char,
    pub nhosts: usize,
    /// Non-zero: a COHORT_EVENT_JOB_END event to this process once every spawned process
    /// ended (PMIX_NOTIFY_COMPLETION).
    pub notify_completion: c_int,
    /// Positive: COHORT_ERR_TIMEOUT if the processes are not all started within this
    /// many milliseconds (the job is then cancelled); zero or negative: no limit.
    pub timeout_ms: c_int,
    /// K of `COHORT_MAP_PER_NODE` (at least 1); else ignored.
    pub per_node: u32,
    /// Cores per process where the session binds (PMIX_CPUS_PER_PROC); 0 or 1: one.
    pub cpus_per_proc: u32,
    /// NULL, or what each process is bound to (PMIX_BINDTO: `none`, `core`,
    /// `hwthread`, `numa`, `package`); NULL: as the launched job.
    pub bind_to: *const c_char,
}

pub type cohort_spawn_cb =
    Option<unsafe extern "C" fn(status: c_int, nspace: *const c_char, cbdata: *mut c_void)>;

/// # Safety
/// `list` points to `n` strings (NULL with 0: none).
unsafe fn strings_in(
    list: *const *const c_char,
    n: usize,
    what: &str,
) -> Result<Vec<String>, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if list.is_null() {
        return Err(bad_param(format!("a list of {n} {what} is NULL")));
    }
    std::slice::from_raw_parts(list, n)
        .iter()
        .map(|&s| text(s, what).map(str::to_string))
        .collect()
}

/// # Safety
/// `app` a valid application.
unsafe fn app_in(app: &cohort_spawn_app_t) -> Result<SpawnApp, c_int> {
    let env = strings_in(app.env, app.nenv, "environment entries")?
        .into_iter()
        .map(|e| match e.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(bad_param(format!("environment entry {e:?} is not VAR=VAL"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SpawnApp {
        command: strings_in(app.argv, app.argc, "arguments")?,
        maxprocs: app.maxprocs,
        env,
        cwd: if app.cwd.is_null() {
            None
        } else {
            Some(text(app.cwd, "the working directory")?.to_string())
        },
        pset: if app.pset.is_null() {
            None
        } else {
            Some(text(app.pset, "the process set name")?.to_string())
        },
    })
}

/// # Safety
/// As `cohort_spawn`.
unsafe fn spawn_args(
    apps: *const cohort_spawn_app_t,
    napps: usize,
    opts: *const cohort_spawn_opts_t,
) -> Result<(Vec<SpawnApp>, SpawnOpts), c_int> {
    if apps.is_null() || napps == 0 {
        return Err(bad_param("a spawn needs at least one application"));
    }
    let apps = std::slice::from_raw_parts(apps, napps)
        .iter()
        .map(|a| app_in(a))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(o) = opts.as_ref() else {
        return Ok((apps, SpawnOpts::default()));
    };
    let mapping = match o.mapping {
        COHORT_MAP_BLOCK => SpawnMapping::Block,
        COHORT_MAP_ROUND_ROBIN => SpawnMapping::RoundRobin,
        COHORT_MAP_PER_NODE if o.per_node > 0 => SpawnMapping::PerNode(o.per_node),
        COHORT_MAP_PER_NODE => {
            return Err(bad_param("COHORT_MAP_PER_NODE needs per_node of 1 or more"))
        }
        other => return Err(bad_param(format!("unknown mapping {other}"))),
    };
    let hosts = strings_in(o.hosts, o.nhosts, "hosts")?;
    let notify_completion = o.notify_completion != 0;
    let timeout_ms = timeout_ms(o.timeout_ms);
    Ok((
        apps,
        SpawnOpts {
            mapping,
            hosts,
            notify_completion,
            timeout_ms,
            cpus_per_proc: o.cpus_per_proc,
            bind_to: if o.bind_to.is_null() {
                None
            } else {
                Some(text(o.bind_to, "the binding")?.to_string())
            },
        },
    ))
}

/// Writes `ns` into `out` (COHORT_MAX_NSLEN + 1 bytes), NUL-terminated.
///
/// # Safety
/// `out` NULL or COHORT_MAX_NSLEN + 1 writable bytes.
unsafe fn nspace_into(ns: &Nspace, out: *mut c_char) {
    if out.is_null() {
        return;
    }
    let bytes = &ns.as_str().as_bytes()[..ns.as_str().len().min(COHORT_MAX_NSLEN)];
    std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), out, bytes.len());
    out.add(bytes.len()).write(0);
}

/// # Safety
/// `client` a live handle; `apps` points to `napps` applications; `opts` NULL or
/// valid; `nspace` NULL or COHORT_MAX_NSLEN + 1 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn cohort_spawn(
    client: *mut cohort_client,
    apps: *const cohort_spawn_app_t,
    napps: usize,
    opts: *const cohort_spawn_opts_t,
    nspace: *mut c_char,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let (apps, opts) = spawn_args(apps, napps, opts)?;
        let ns = c.client.spawn(apps, opts).map_err(fail)?;
        nspace_into(&ns, nspace);
        Ok(())
    })
}

/// # Safety
/// As `cohort_spawn`; `cb` is called once on the completion thread with the new
/// namespace ("" on failure), valid during the call, and `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn cohort_spawn_nb(
    client: *mut cohort_client,
    apps: *const cohort_spawn_app_t,
    napps: usize,
    opts: *const cohort_spawn_opts_t,
    cb: cohort_spawn_cb,
    cbdata: *mut c_void,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        let cb = cb.ok_or_else(|| bad_param("the callback is NULL"))?;
        let (apps, opts) = spawn_args(apps, napps, opts)?;
        let data = CbData(cbdata);
        complete(c.client.spawn_async(apps, opts), move |r| {
            let data = data;
            let (st, ns) = match r {
                Ok(ns) => (COHORT_SUCCESS, ns.to_string()),
                Err(st) => (st, String::new()),
            };
            let ns = CString::new(ns).unwrap_or_default();
            // SAFETY: the caller's callback, with its own data.
            unsafe { cb(st, ns.as_ptr(), data.0) }
        });
        Ok(())
    })
}

/// The process that spawned this process's job (PMIX_PARENT_ID), or
/// COHORT_ERR_NOT_FOUND for a job `cohort run` launched.
///
/// # Safety
/// `client` a live handle; `parent` writable.
#[no_mangle]
pub unsafe extern "C" fn cohort_parent(
    client: *mut cohort_client,
    parent: *mut cohort_proc_t,
) -> c_int {
    status(|| {
        let c = handle(client)?;
        if parent.is_null() {
            return Err(bad_param("the address for the parent is NULL"));
        }
        match c.client.parent().map_err(fail)? {
            Some(p) => {
                parent.write(proc_out(&p));
                Ok(())
            }
            None => {
                set_error(format!(
                    "job {} was launched, not spawned",
                    c.client.nspace()
                ));
                Err(COHORT_ERR_NOT_FOUND)
            }
        }
    })
}
