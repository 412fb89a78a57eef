//! PMIx_Spawn and PMIx_Spawn_nb on cohort's spawn: a process of the session starts a
//! new job in a namespace of its own (what MPI_Comm_spawn uses).
//!
//! Each `pmix_app_t` becomes a [`SpawnApp`]: the program is `cmd` (or `argv[0]` when
//! `cmd` is NULL) with `argv[1..]` as its arguments, `env` entries are `VAR=VAL`, and
//! the working directory is `cwd`, else the app's PMIX_WDIR, else the job's. Of the
//! job's and the apps' infos, PMIX_MAPBY (`node` or `ppr:N:node`: one per node server
//! in turn, else block-wise; a `PE=n` modifier gives each process n cores) and
//! PMIX_HOST (a comma-separated list of node server names) place the processes;
//! PMIX_CPUS_PER_PROC gives each process that many cores where the session binds;
//! PMIX_BINDTO (`none`, `core`, `hwthread`, `numa`, `package` or `socket`) binds them
//! otherwise than the launched job (the launcher refuses another word);
//! PMIX_NOTIFY_COMPLETION asks for PMIX_EVENT_JOB_END;
//! PMIX_TIMEOUT or PMIX_SPAWN_TIMEOUT (seconds) fails the spawn with
//! PMIX_ERR_TIMEOUT, its job cancelled, unless every process started in time. An
//! app's PMIX_PSET_NAME makes its processes a process set of the session while the
//! job runs (every process of the session is told with PMIX_PROCESS_SET_DEFINE, and
//! PMIX_PROCESS_SET_DELETE once the job ended).
//! Everything else is ignored unless it is marked required (PMIX_INFO_REQD), which
//! fails the spawn with PMIX_ERR_NOT_SUPPORTED. Open MPI sets no info as required.

use std::ffi::{c_char, c_void};

use cohort::{Nspace, SpawnApp, SpawnMapping, SpawnOpts};

use crate::types::*;
use crate::value::*;
use crate::*;

/// The infos of a spawn this library reads; any other one marked required fails it.
const UNDERSTOOD: &[&str] = &[
    PMIX_WDIR,
    PMIX_MAPBY,
    PMIX_CPUS_PER_PROC,
    PMIX_BINDTO,
    PMIX_HOST,
    PMIX_NOTIFY_COMPLETION,
    PMIX_TIMEOUT,
    PMIX_SPAWN_TIMEOUT,
    PMIX_PSET_NAME,
];

/// The infos of a C array, or PMIX_ERR_NOT_SUPPORTED when one this library does not
/// read is marked required.
///
/// # Safety
/// `info` NULL or `n` valid infos.
unsafe fn spawn_infos(
    info: *const pmix_info_t,
    n: usize,
) -> Result<Vec<(String, PVal)>, pmix_status_t> {
    if !info.is_null() && n > 0 {
        // SAFETY: per the contract.
        let raw = unsafe { std::slice::from_raw_parts(info, n) };
        if let Some(i) = raw.iter().find(|i| {
            i.flags & PMIX_INFO_REQD != 0 && !UNDERSTOOD.contains(&key_in(&i.key).as_str())
        }) {
            debug(|| format!("PMIx_Spawn: required info {:?}", key_in(&i.key)));
            return Err(PMIX_ERR_NOT_SUPPORTED);
        }
    }
    // SAFETY: forwarded contract.
    Ok(unsafe { infos(info, n) })
}

/// The strings of a NULL-terminated array (NULL: none).
///
/// # Safety
/// `list` NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn argv_in(list: *const *mut c_char) -> Result<Vec<String>, pmix_status_t> {
    let mut out = Vec::new();
    if list.is_null() {
        return Ok(out);
    }
    for i in 0.. {
        // SAFETY: NULL-terminated, per the contract.
        let s = unsafe { *list.add(i) };
        if s.is_null() {
            break;
        }
        // SAFETY: NUL-terminated, per the contract.
        out.push(unsafe { text(s) }?);
    }
    Ok(out)
}

fn string_of(v: &PVal) -> Result<String, pmix_status_t> {
    match v {
        PVal::Str(s) => Ok(s.clone()),
        _ => Err(PMIX_ERR_BAD_PARAM),
    }
}

/// PMIX_MAPBY: `node` (optionally with modifiers after a colon) places one process per
/// node server in turn, `ppr:N:node` N per node server in turn (PMIX_ERR_BAD_PARAM for
/// an N that is not a count of 1 or more); anything else block-wise.
fn mapping_of(policy: &str) -> Result<SpawnMapping, pmix_status_t> {
    let parts: Vec<String> = policy
        .split(':')
        .map(|p| p.trim().to_ascii_lowercase())
        .collect();
    Ok(match parts.as_slice() {
        [first, ..] if first == "node" => SpawnMapping::RoundRobin,
        [ppr, n, unit, ..] if ppr == "ppr" && unit == "node" => match n.parse::<u32>() {
            Ok(n) if n > 0 => SpawnMapping::PerNode(n),
            _ => return Err(PMIX_ERR_BAD_PARAM),
        },
        _ => SpawnMapping::Block,
    })
}

/// The `PE=n` modifier of a PMIX_MAPBY value (`slot:PE=2`, `ppr:1:node:PE=4`,
/// modifiers after `:` or `,`): the cores each process gets; `None` without one,
/// PMIX_ERR_BAD_PARAM for an n that is not a count of 1 or more.
fn cpus_of(policy: &str) -> Result<Option<u32>, pmix_status_t> {
    let mut cpus = None;
    for part in policy.split([':', ',']) {
        let Some((key, n)) = part.trim().split_once('=') else {
            continue;
        };
        if key.trim().eq_ignore_ascii_case("pe") {
            match n.trim().parse::<u32>() {
                Ok(n) if n > 0 => cpus = Some(n),
                _ => return Err(PMIX_ERR_BAD_PARAM),
            }
        }
    }
    Ok(cpus)
}

/// PMIX_HOST: node server names, comma-separated.
fn hosts_of(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect()
}

/// Reads PMIX_MAPBY, PMIX_CPUS_PER_PROC (which wins over a `PE=n` of PMIX_MAPBY),
/// PMIX_BINDTO, PMIX_HOST, PMIX_NOTIFY_COMPLETION and the timeout (PMIX_TIMEOUT or
/// PMIX_SPAWN_TIMEOUT, seconds, 0: none; PMIX_SPAWN_TIMEOUT wins) of `info` into
/// `opts` (a later info array wins).
fn placement(info: &[(String, PVal)], opts: &mut SpawnOpts) -> Result<(), pmix_status_t> {
    for key in [PMIX_TIMEOUT, PMIX_SPAWN_TIMEOUT] {
        if let Some(v) = find(info, key) {
            // As elsewhere, a negative or non-integer value is no limit.
            let secs = v.as_u64().unwrap_or(0);
            opts.timeout_ms = Some(secs.saturating_mul(1000)).filter(|&ms| ms > 0);
        }
    }
    if let Some(v) = find(info, PMIX_MAPBY) {
        let policy = string_of(v)?;
        opts.mapping = mapping_of(&policy)?;
        if let Some(n) = cpus_of(&policy)? {
            opts.cpus_per_proc = n;
        }
    }
    if let Some(v) = find(info, PMIX_CPUS_PER_PROC) {
        opts.cpus_per_proc = match v.as_u64() {
            Some(n) if (1..=u64::from(u16::MAX)).contains(&n) => n as u32,
            _ => return Err(PMIX_ERR_BAD_PARAM),
        };
    }
    if let Some(v) = find(info, PMIX_BINDTO) {
        opts.bind_to = Some(string_of(v)?);
    }
    if let Some(v) = find(info, PMIX_HOST) {
        opts.hosts = hosts_of(&string_of(v)?);
    }
    if let Some(v) = find(info, PMIX_NOTIFY_COMPLETION) {
        opts.notify_completion = v.truthy();
    }
    Ok(())
}

/// One application of a spawn.
///
/// # Safety
/// `app` a valid application.
unsafe fn app_in(
    app: &pmix_app_t,
    job_wdir: Option<&String>,
    opts: &mut SpawnOpts,
) -> Result<SpawnApp, pmix_status_t> {
    // SAFETY: per the contract.
    let argv = unsafe { argv_in(app.argv) }?;
    // SAFETY: per the contract.
    let cmd = unsafe { c_str(app.cmd) };
    let command = match cmd {
        Some(c) => std::iter::once(c)
            .chain(argv.iter().skip(1).cloned())
            .collect(),
        None => argv,
    };
    if command.first().is_none_or(String::is_empty) {
        return Err(PMIX_ERR_BAD_PARAM);
    }
    let maxprocs = u32::try_from(app.maxprocs)
        .ok()
        .filter(|&n| n > 0)
        .ok_or(PMIX_ERR_BAD_PARAM)?;
    // SAFETY: per the contract.
    let env = unsafe { argv_in(app.env) }?
        .into_iter()
        .map(|e| match e.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(PMIX_ERR_BAD_PARAM),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // SAFETY: forwarded contract.
    let info = unsafe { spawn_infos(app.info, app.ninfo) }?;
    placement(&info, opts)?;
    let app_wdir = find(&info, PMIX_WDIR).map(string_of).transpose()?;
    let pset = find(&info, PMIX_PSET_NAME).map(string_of).transpose()?;
    // SAFETY: per the contract.
    let cwd = unsafe { c_str(app.cwd) }
        .filter(|c| !c.is_empty())
        .or(app_wdir)
        .or_else(|| job_wdir.cloned());
    Ok(SpawnApp {
        command,
        maxprocs,
        env,
        cwd,
        pset,
    })
}

/// The request of a spawn.
///
/// # Safety
/// As `PMIx_Spawn`.
unsafe fn spawn_args(
    job_info: *const pmix_info_t,
    ninfo: usize,
    apps: *const pmix_app_t,
    napps: usize,
) -> Result<(Vec<SpawnApp>, SpawnOpts), pmix_status_t> {
    if apps.is_null() || napps == 0 {
        return Err(PMIX_ERR_BAD_PARAM);
    }
    // SAFETY: forwarded contract.
    let job = unsafe { spawn_infos(job_info, ninfo) }?;
    let mut opts = SpawnOpts::default();
    placement(&job, &mut opts)?;
    let job_wdir = find(&job, PMIX_WDIR).map(string_of).transpose()?;
    // SAFETY: per the contract.
    let apps = unsafe { std::slice::from_raw_parts(apps, napps) }
        .iter()
        // SAFETY: each a valid application, per the contract.
        .map(|a| unsafe { app_in(a, job_wdir.as_ref(), &mut opts) })
        .collect::<Result<Vec<_>, _>>()?;
    debug(|| format!("PMIx_Spawn {apps:?} {opts:?}"));
    Ok((apps, opts))
}

/// Copies `ns` into the caller's `pmix_nspace_t` (NUL-terminated, cut to
/// PMIX_MAX_NSLEN characters).
///
/// # Safety
/// `out` NULL or PMIX_MAX_NSLEN + 1 writable characters.
unsafe fn nspace_into(ns: &Nspace, out: *mut c_char) {
    if out.is_null() {
        return;
    }
    let text = nspace_out(ns.as_str());
    // SAFETY: `out` has room for PMIX_MAX_NSLEN + 1 characters, as `text` has.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), out, text.len()) };
}

/// Starts `apps` as a new job of this session and writes its namespace into `nspace`
/// (when not NULL) once every node server knows it and its processes are started.
///
/// # Safety
/// `job_info` NULL or `ninfo` infos; `apps` `napps` valid applications; `nspace`
/// NULL or a `pmix_nspace_t`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Spawn(
    job_info: *const pmix_info_t,
    ninfo: usize,
    apps: *const pmix_app_t,
    napps: usize,
    nspace: *mut c_char,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (apps, opts) = unsafe { spawn_args(job_info, ninfo, apps, napps) }?;
        let ns = s.client.spawn(apps, opts).map_err(|e| status_of(&e))?;
        debug(|| format!("PMIx_Spawn -> {ns}"));
        // SAFETY: per the contract.
        unsafe { nspace_into(&ns, nspace) };
        Ok(())
    })
}

/// As `PMIx_Spawn`; `cbfunc` gets the status and the new namespace (valid during the
/// call; empty on failure) on the library's completion thread.
///
/// # Safety
/// As `PMIx_Spawn`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Spawn_nb(
    job_info: *const pmix_info_t,
    ninfo: usize,
    apps: *const pmix_app_t,
    napps: usize,
    cbfunc: pmix_spawn_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (apps, opts) = unsafe { spawn_args(job_info, ninfo, apps, napps) }?;
        let fut = s.client.spawn_async(apps, opts);
        let data = CbData(cbdata);
        complete(fut, move |r| {
            let data = data;
            let Some(cb) = cbfunc else { return };
            let (status, mut ns) = match r {
                Ok(ns) => (PMIX_SUCCESS, nspace_out(ns.as_str())),
                Err(e) => (status_of(&e), nspace_out("")),
            };
            // SAFETY: the caller's callback, with a namespace valid during the call.
            unsafe { cb(status, ns.as_mut_ptr(), data.0) };
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_by_node_places_round_robin_ppr_per_node_and_anything_else_block_wise() {
        for p in ["node", "NODE", "node:OVERSUBSCRIBE"] {
            assert_eq!(mapping_of(p), Ok(SpawnMapping::RoundRobin), "{p}");
        }
        assert_eq!(mapping_of("ppr:1:node"), Ok(SpawnMapping::PerNode(1)));
        assert_eq!(mapping_of("ppr:2:node:pe=1"), Ok(SpawnMapping::PerNode(2)));
        for p in ["ppr:0:node", "ppr:x:node", "ppr::node"] {
            assert_eq!(mapping_of(p), Err(PMIX_ERR_BAD_PARAM), "{p}");
        }
        for p in ["slot", "core", "ppr:2:socket", "", "byslot"] {
            assert_eq!(mapping_of(p), Ok(SpawnMapping::Block), "{p}");
        }
        assert_eq!(hosts_of(" a, b,,c "), ["a", "b", "c"]);
    }

    #[test]
    fn pe_of_map_by_and_cpus_per_proc_give_each_process_that_many_cores() {
        assert_eq!(cpus_of("ppr:1:node:PE=4"), Ok(Some(4)));
        assert_eq!(cpus_of("slot,pe=2"), Ok(Some(2)));
        assert_eq!(cpus_of("node:OVERSUBSCRIBE"), Ok(None));
        for p in ["slot:PE=0", "slot:PE=x", "slot:pe="] {
            assert_eq!(cpus_of(p), Err(PMIX_ERR_BAD_PARAM), "{p}");
        }
        let read = |info: Vec<(&str, PVal)>| {
            let info: Vec<(String, PVal)> =
                info.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let mut opts = SpawnOpts::default();
            placement(&info, &mut opts).map(|()| (opts.mapping, opts.cpus_per_proc, opts.bind_to))
        };
        assert_eq!(read(vec![]), Ok((SpawnMapping::Block, 0, None)));
        assert_eq!(
            read(vec![(PMIX_MAPBY, PVal::Str("ppr:2:node:PE=3".into()))]),
            Ok((SpawnMapping::PerNode(2), 3, None))
        );
        assert_eq!(
            read(vec![(PMIX_CPUS_PER_PROC, PVal::Uint16(2))]),
            Ok((SpawnMapping::Block, 2, None))
        );
        assert_eq!(
            read(vec![(PMIX_BINDTO, PVal::Str("none".into()))]),
            Ok((SpawnMapping::Block, 0, Some("none".to_string())))
        );
        // PMIX_CPUS_PER_PROC wins over PE=n.
        assert_eq!(
            read(vec![
                (PMIX_MAPBY, PVal::Str("node:PE=4".into())),
                (PMIX_CPUS_PER_PROC, PVal::Uint16(2)),
            ]),
            Ok((SpawnMapping::RoundRobin, 2, None))
        );
        for bad in [PVal::Uint16(0), PVal::Int(-2), PVal::Uint32(1 << 20)] {
            assert_eq!(
                read(vec![(PMIX_CPUS_PER_PROC, bad.clone())]),
                Err(PMIX_ERR_BAD_PARAM),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn pmix_timeout_and_spawn_timeout_limit_the_spawn() {
        let read = |info: Vec<(&str, PVal)>, start: Option<u64>| {
            let info: Vec<(String, PVal)> =
                info.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let mut opts = SpawnOpts {
                timeout_ms: start,
                ..SpawnOpts::default()
            };
            placement(&info, &mut opts).unwrap();
            opts.timeout_ms
        };
        assert_eq!(read(vec![], None), None);
        assert_eq!(read(vec![(PMIX_TIMEOUT, PVal::Int(3))], None), Some(3000));
        assert_eq!(
            read(vec![(PMIX_SPAWN_TIMEOUT, PVal::Uint32(2))], None),
            Some(2000)
        );
        let both = vec![
            (PMIX_SPAWN_TIMEOUT, PVal::Int(2)),
            (PMIX_TIMEOUT, PVal::Int(9)),
        ];
        assert_eq!(read(both, None), Some(2000), "PMIX_SPAWN_TIMEOUT wins");
        // 0 or a negative value: none, also over the job's infos' limit.
        assert_eq!(read(vec![(PMIX_TIMEOUT, PVal::Int(0))], Some(5000)), None);
        assert_eq!(read(vec![(PMIX_TIMEOUT, PVal::Int(-1))], None), None);
        // An app's infos without a timeout keep the job's.
        assert_eq!(
            read(vec![(PMIX_HOST, PVal::Str("a".into()))], Some(5000)),
            Some(5000)
        );
    }
}
