//! Process groups (`PMIx_Group_*`), connections (`PMIx_Connect`/`Disconnect`), peer
//! and node resolution, and queries (`PMIx_Query_info`) on the cohort client.

use std::ffi::{c_char, c_void};
use std::future::Future;
use std::pin::Pin;

use cohort::{
    ConnectOpts, ConstructOpts, ConstructStatus, DisconnectOpts, GroupResult, InviteOpts, ProcId,
};

use crate::types::*;
use crate::value::*;
use crate::*;

type Infos = Vec<(String, PVal)>;
type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The results of a construct, invite or join: PMIX_GROUP_CONTEXT_ID (when one was
/// assigned) and PMIX_GROUP_MEMBERSHIP.
fn group_results(g: &GroupResult) -> Infos {
    let mut out = Vec::new();
    if let Some(ctx) = g.context_id {
        out.push((PMIX_GROUP_CONTEXT_ID.to_string(), PVal::Size(ctx)));
    }
    out.push((
        PMIX_GROUP_MEMBERSHIP.to_string(),
        PVal::Array(
            PMIX_PROC,
            g.members.iter().cloned().map(PVal::Proc).collect(),
        ),
    ));
    out
}

pub(crate) fn procs_of(v: Option<&PVal>) -> Vec<ProcId> {
    match v {
        Some(PVal::Array(_, ps)) => ps
            .iter()
            .filter_map(|p| match p {
                PVal::Proc(p) => Some(p.clone()),
                _ => None,
            })
            .collect(),
        Some(PVal::Proc(p)) => vec![p.clone()],
        _ => Vec::new(),
    }
}

/// PMIX_GROUP_INFO: the caller's contributions (an array of infos).
fn group_info(info: &Infos) -> cohort::Info {
    match find(info, PMIX_GROUP_INFO) {
        Some(PVal::Array(_, items)) => items
            .iter()
            .filter_map(|i| match i {
                PVal::Info(k, v) => Some((k.clone(), to_cohort(v))),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Writes `items` to the caller's `(results, nresults)` (both may be NULL: dropped).
///
/// # Safety
/// `results` and `nresults` are NULL or writable.
unsafe fn results_out(items: &Infos, results: *mut *mut pmix_info_t, nresults: *mut usize) {
    if results.is_null() || nresults.is_null() {
        return;
    }
    let (arr, n) = info_array_out(items);
    // SAFETY: both writable per the contract.
    unsafe {
        results.write(arr);
        nresults.write(n);
    }
}

/// Calls an info callback on the completion thread with `r`'s results, released
/// after the call returns (when the callback hands no release function back, PMIx
/// says the results are valid only during the call).
fn info_callback(
    cb: pmix_info_cbfunc_t,
    data: CbData,
    fut: impl Future<Output = Result<(pmix_status_t, Infos), pmix_status_t>> + Send + 'static,
) -> Result<(), pmix_status_t> {
    complete(fut, move |r| {
        let data = data;
        let Some(cb) = cb else { return };
        let (status, items) = match r {
            Ok(done) => done,
            Err(s) => (s, Vec::new()),
        };
        let (arr, n) = info_array_out(&items);
        // SAFETY: the caller's callback; the array is ours and released after.
        unsafe {
            cb(status, arr, n, data.0, None, std::ptr::null_mut());
            info_array_free(arr, n);
        }
    })
}

fn group_status<T>(r: cohort::Result<T>) -> Result<T, pmix_status_t> {
    r.map_err(|e| status_of(&e))
}

/// The status a construct or invite returns with its results: PMIX_ERR_PARTIAL_SUCCESS
/// when listed processes did not take part (the spec's PMIX_GROUP_OPTIONAL outcome),
/// unless the caller asked only for PMIX_GROUP_FT_COLLECTIVE (`ft_only`), which
/// completes among the survivors as a success.
fn group_code(g: &GroupResult, ft_only: bool) -> pmix_status_t {
    match g.status {
        ConstructStatus::PartialSuccess if !ft_only => PMIX_ERR_PARTIAL_SUCCESS,
        _ => PMIX_SUCCESS,
    }
}

/// `code` as the blocking calls return it (after writing their results).
fn as_return(code: pmix_status_t) -> Result<(), pmix_status_t> {
    match code {
        PMIX_SUCCESS => Ok(()),
        c => Err(c),
    }
}

// ------------------------------------------------------------------ construct

/// # Safety
/// As `PMIx_Group_construct`.
unsafe fn construct_args(
    s: &State,
    grp: *const c_char,
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
) -> Result<(String, Vec<ProcId>, ConstructOpts, bool), pmix_status_t> {
    // SAFETY: forwarded contract.
    let (id, procs, info) = unsafe { (text(grp)?, procs_in(procs, nprocs)?, infos(info, ninfo)) };
    let procs = expand(&s.client, procs);
    // PMIX_GROUP_FT_COLLECTIVE: processes that terminate before joining are dropped on
    // the fly, as PMIX_GROUP_OPTIONAL has it; alone, the survivors' group is a success.
    let optional = flag(&info, PMIX_GROUP_OPTIONAL);
    let ft = flag(&info, PMIX_GROUP_FT_COLLECTIVE);
    let opts = ConstructOpts {
        timeout_ms: timeout(&info).map(|t| t.as_millis() as u64),
        optional: optional || ft,
        leader: flag(&info, PMIX_GROUP_LEADER),
        notify_termination: flag(&info, PMIX_GROUP_NOTIFY_TERMINATION),
        assign_context_id: flag(&info, PMIX_GROUP_ASSIGN_CONTEXT_ID),
        add_members: expand(&s.client, procs_of(find(&info, PMIX_GROUP_ADD_MEMBERS))),
        group_info: group_info(&info),
        local_only: flag(&info, PMIX_GROUP_LOCAL_ONLY),
        ..Default::default()
    };
    Ok((id, procs, opts, ft && !optional))
}

/// Collective construct of group `grp` by `procs` (every listed process calls with the
/// same list; `{nspace, PMIX_RANK_WILDCARD}` names a whole job). Directives:
/// PMIX_GROUP_ASSIGN_CONTEXT_ID, PMIX_TIMEOUT, PMIX_GROUP_LEADER, PMIX_GROUP_OPTIONAL,
/// PMIX_GROUP_FT_COLLECTIVE, PMIX_GROUP_LOCAL_ONLY, PMIX_GROUP_NOTIFY_TERMINATION,
/// PMIX_GROUP_ADD_MEMBERS, PMIX_GROUP_INFO. Results:
/// PMIX_GROUP_CONTEXT_ID (`size_t`) and PMIX_GROUP_MEMBERSHIP (array of processes);
/// PMIX_ERR_PARTIAL_SUCCESS, with the results, when optional members did not take
/// part.
///
/// # Safety
/// `grp` NUL-terminated; `procs` NULL or `nprocs` processes; `info` NULL or `ninfo`
/// infos; `results`, `nresults` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_construct(
    grp: *const c_char,
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
    results: *mut *mut pmix_info_t,
    nresults: *mut usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (id, procs, opts, ft_only) =
            unsafe { construct_args(&s, grp, procs, nprocs, info, ninfo) }?;
        let g = group_status(s.client.group_construct(&id, &procs, opts))?;
        // SAFETY: forwarded contract.
        unsafe { results_out(&group_results(&g), results, nresults) };
        as_return(group_code(&g, ft_only))
    })
}

/// As `PMIx_Group_construct`; `cbfunc` gets the status and results on the completion
/// thread (valid during the call).
///
/// # Safety
/// As `PMIx_Group_construct`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_construct_nb(
    grp: *const c_char,
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (id, procs, opts, ft_only) =
            unsafe { construct_args(&s, grp, procs, nprocs, info, ninfo) }?;
        let fut = s.client.group_construct_async(&id, &procs, opts);
        info_callback(cbfunc, CbData(cbdata), async move {
            group_status(fut.await).map(|g| (group_code(&g, ft_only), group_results(&g)))
        })
    })
}

/// Collective destruct of group `grp` (PMIX_TIMEOUT honoured; with
/// PMIX_GROUP_FT_COLLECTIVE from every member, members that terminated are not waited
/// for).
///
/// # Safety
/// `grp` NUL-terminated; `info` NULL or `ninfo` infos.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_destruct(
    grp: *const c_char,
    info: *const pmix_info_t,
    ninfo: usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (id, info) = unsafe { (text(grp)?, infos(info, ninfo)) };
        let r = if flag(&info, PMIX_GROUP_FT_COLLECTIVE) {
            s.client.group_destruct_tolerant(&id, timeout(&info))
        } else {
            s.client.group_destruct(&id, timeout(&info))
        };
        group_status(r)
    })
}

/// As `PMIx_Group_destruct`; `cbfunc` gets the status on the completion thread.
///
/// # Safety
/// As `PMIx_Group_destruct`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_destruct_nb(
    grp: *const c_char,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (id, info) = unsafe { (text(grp)?, infos(info, ninfo)) };
        // PMIX_GROUP_FT_COLLECTIVE, as the blocking form.
        let fut: Pin<Box<dyn Future<Output = cohort::Result<()>> + Send>> =
            if flag(&info, PMIX_GROUP_FT_COLLECTIVE) {
                Box::pin(s.client.group_destruct_tolerant_async(&id, timeout(&info)))
            } else {
                Box::pin(s.client.group_destruct_async(&id, timeout(&info)))
            };
        op_callback(cbfunc, CbData(cbdata), status_after(fut))
    })
}

/// # Safety
/// As `PMIx_Group_invite`.
unsafe fn invite_args(
    s: &State,
    grp: *const c_char,
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
) -> Result<(String, Vec<ProcId>, InviteOpts), pmix_status_t> {
    // SAFETY: forwarded contract.
    let (id, procs, info) = unsafe { (text(grp)?, procs_in(procs, nprocs)?, infos(info, ninfo)) };
    let me = s.client.proc_id().clone();
    let procs: Vec<ProcId> = expand(&s.client, procs)
        .into_iter()
        .filter(|p| *p != me)
        .collect();
    let opts = InviteOpts {
        timeout_ms: timeout(&info).map(|t| t.as_millis() as u64),
        assign_context_id: flag(&info, PMIX_GROUP_ASSIGN_CONTEXT_ID),
        notify_termination: flag(&info, PMIX_GROUP_NOTIFY_TERMINATION),
        group_info: group_info(&info),
        decide_declines: false,
    };
    Ok((id, procs, opts))
}

/// Invite method: this process leads group `grp` and invites `procs` (each gets
/// PMIX_GROUP_INVITED and answers with `PMIx_Group_join`). Declined or failed invitees
/// are dropped. Results as `PMIx_Group_construct`.
///
/// # Safety
/// As `PMIx_Group_construct`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_invite(
    grp: *const c_char,
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
    results: *mut *mut pmix_info_t,
    nresults: *mut usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (id, procs, opts) = unsafe { invite_args(&s, grp, procs, nprocs, info, ninfo) }?;
        let g = group_status(s.client.group_invite(&id, &procs, opts))?;
        // SAFETY: forwarded contract.
        unsafe { results_out(&group_results(&g), results, nresults) };
        as_return(group_code(&g, false))
    })
}

/// As `PMIx_Group_invite`, with the results to `cbfunc` on the completion thread.
///
/// # Safety
/// As `PMIx_Group_construct_nb`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_invite_nb(
    grp: *const c_char,
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (id, procs, opts) = unsafe { invite_args(&s, grp, procs, nprocs, info, ninfo) }?;
        let fut = s.client.group_invite_async(&id, &procs, opts);
        info_callback(cbfunc, CbData(cbdata), async move {
            group_status(fut.await).map(|g| (group_code(&g, false), group_results(&g)))
        })
    })
}

/// The arguments of a join: group id, leader, accept, timeout, group info.
type JoinArgs = (
    String,
    ProcId,
    bool,
    Option<std::time::Duration>,
    cohort::Info,
);

/// # Safety
/// As `PMIx_Group_join`.
unsafe fn join_args(
    grp: *const c_char,
    leader: *const pmix_proc_t,
    opt: pmix_group_opt_t,
    info: *const pmix_info_t,
    ninfo: usize,
) -> Result<JoinArgs, pmix_status_t> {
    // SAFETY: forwarded contract.
    let (id, info) = unsafe { (text(grp)?, infos(info, ninfo)) };
    // SAFETY: NULL checked; a process per the contract.
    let leader = proc_in(unsafe { leader.as_ref() }.ok_or(PMIX_ERR_BAD_PARAM)?)?;
    let accept = match opt as u32 {
        PMIX_GROUP_ACCEPT => true,
        PMIX_GROUP_DECLINE => false,
        _ => return Err(PMIX_ERR_BAD_PARAM),
    };
    Ok((id, leader, accept, timeout(&info), group_info(&info)))
}

fn join_results(r: Option<GroupResult>) -> Infos {
    r.map(|g| group_results(&g)).unwrap_or_default()
}

/// Answers the invitation to `grp` from `leader` (PMIX_GROUP_ACCEPT waits for the
/// group to complete and gives its results; PMIX_GROUP_DECLINE returns at once).
///
/// # Safety
/// `grp` NUL-terminated; `leader` a process; `info` NULL or `ninfo` infos; `results`,
/// `nresult` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_join(
    grp: *const c_char,
    leader: *const pmix_proc_t,
    opt: pmix_group_opt_t,
    info: *const pmix_info_t,
    ninfo: usize,
    results: *mut *mut pmix_info_t,
    nresult: *mut usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (id, leader, accept, t, gi) = unsafe { join_args(grp, leader, opt, info, ninfo) }?;
        let r = group_status(s.client.group_join(&id, &leader, accept, t, gi))?;
        // SAFETY: forwarded contract.
        unsafe { results_out(&join_results(r), results, nresult) };
        Ok(())
    })
}

/// As `PMIx_Group_join`; safe to call from an event handler.
///
/// # Safety
/// As `PMIx_Group_join`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_join_nb(
    grp: *const c_char,
    leader: *const pmix_proc_t,
    opt: pmix_group_opt_t,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (id, leader, accept, t, gi) = unsafe { join_args(grp, leader, opt, info, ninfo) }?;
        let fut = s.client.group_join_async(&id, &leader, accept, t, gi);
        info_callback(cbfunc, CbData(cbdata), async move {
            group_status(fut.await).map(|r| (PMIX_SUCCESS, join_results(r)))
        })
    })
}

/// Leaves group `grp`; the other members get PMIX_GROUP_LEFT.
///
/// # Safety
/// `grp` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_leave(
    grp: *const c_char,
    _info: *const pmix_info_t,
    _ninfo: usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let id = unsafe { text(grp) }?;
        group_status(s.client.group_leave(&id))
    })
}

/// As `PMIx_Group_leave`; `cbfunc` gets the status on the completion thread.
///
/// # Safety
/// As `PMIx_Group_leave`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Group_leave_nb(
    grp: *const c_char,
    _info: *const pmix_info_t,
    _ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let id = unsafe { text(grp) }?;
        let fut = s.client.group_leave_async(&id);
        op_callback(cbfunc, CbData(cbdata), status_after(fut))
    })
}

// ------------------------------------------------------------------ connect

/// # Safety
/// As `PMIx_Connect`.
unsafe fn connect_args(
    s: &State,
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
) -> Result<(Vec<ProcId>, Infos), pmix_status_t> {
    // SAFETY: forwarded contract.
    let (procs, info) = unsafe { (procs_in(procs, nprocs)?, infos(info, ninfo)) };
    if procs.is_empty() {
        return Err(PMIX_ERR_BAD_PARAM);
    }
    Ok((expand(&s.client, procs), info))
}

/// Connects the processes named (every one calls with the same list): their posted
/// data becomes readable by each other.
///
/// # Safety
/// `procs` `nprocs` processes; `info` NULL or `ninfo` infos.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Connect(
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (procs, info) = unsafe { connect_args(&s, procs, nprocs, info, ninfo) }?;
        let opts = ConnectOpts {
            timeout: timeout(&info),
            ..Default::default()
        };
        let conn = group_status(s.client.connect_procs(&procs, opts))?;
        lock(&s.connections).push((procs, conn.nspace));
        Ok(())
    })
}

/// As `PMIx_Connect`; `cbfunc` gets the status on the completion thread.
///
/// # Safety
/// As `PMIx_Connect`; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Connect_nb(
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
        let (procs, info) = unsafe { connect_args(&s, procs, nprocs, info, ninfo) }?;
        let opts = ConnectOpts {
            timeout: timeout(&info),
            ..Default::default()
        };
        let fut = s.client.connect_procs_async(&procs, opts);
        let st = Arc::clone(&s);
        op_callback(cbfunc, CbData(cbdata), async move {
            match fut.await {
                Ok(conn) => {
                    lock(&st.connections).push((procs, conn.nspace));
                    PMIX_SUCCESS
                }
                Err(e) => status_of(&e),
            }
        })
    })
}

/// Takes the connection made over `procs` out of this process's list: its processes
/// and nspace (none when the connect was a fence).
fn take_connection(
    s: &State,
    procs: &[ProcId],
) -> Result<(Vec<ProcId>, Option<String>), pmix_status_t> {
    let mut conns = lock(&s.connections);
    let i = conns
        .iter()
        .position(|(p, _)| p == procs)
        .ok_or(PMIX_ERR_NOT_FOUND)?;
    Ok(conns.remove(i))
}

fn disconnect_opts(info: &Infos) -> DisconnectOpts {
    DisconnectOpts {
        timeout: timeout(info),
        ..Default::default()
    }
}

fn fence_opts(info: &Infos) -> FenceOpts {
    FenceOpts {
        collect: false,
        timeout_ms: timeout(info).map(|t| t.as_millis() as u64),
        ft_collective: false,
    }
}

/// The disconnect, started now: a destruct of the connection's nspace, or a fence
/// when the connect was one.
fn disconnect_fut(
    s: &Arc<State>,
    procs: &[ProcId],
    info: &Infos,
) -> Result<BoxFut<pmix_status_t>, pmix_status_t> {
    let (procs, nspace) = take_connection(s, procs)?;
    Ok(match nspace {
        Some(ns) => {
            let f = s.client.disconnect_async(&ns, disconnect_opts(info));
            Box::pin(async move { f.await.err().map_or(PMIX_SUCCESS, |e| status_of(&e)) })
        }
        None => {
            let f = s.client.fence_async(&procs, fence_opts(info));
            Box::pin(async move { f.await.err().map_or(PMIX_SUCCESS, |e| status_of(&e)) })
        }
    })
}

/// Ends the connection made by `PMIx_Connect` over the same processes (collective).
///
/// # Safety
/// As `PMIx_Connect`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Disconnect(
    procs: *const pmix_proc_t,
    nprocs: usize,
    info: *const pmix_info_t,
    ninfo: usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: forwarded contract.
        let (procs, info) = unsafe { connect_args(&s, procs, nprocs, info, ninfo) }?;
        let r = match take_connection(&s, &procs)? {
            (_, Some(ns)) => s.client.disconnect(&ns, disconnect_opts(&info)),
            (procs, None) => s.client.fence(&procs, fence_opts(&info)),
        };
        group_status(r)
    })
}

/// As `PMIx_Disconnect`; `cbfunc` gets the status on the completion thread.
///
/// # Safety
/// As `PMIx_Connect_nb`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Disconnect_nb(
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
        let (procs, info) = unsafe { connect_args(&s, procs, nprocs, info, ninfo) }?;
        let fut = disconnect_fut(&s, &procs, &info)?;
        op_callback(cbfunc, CbData(cbdata), fut)
    })
}

// ------------------------------------------------------------------ resolve

/// The processes of `nspace` (NULL or empty: this job) on node `nodename` (NULL: this
/// node), as a `malloc`'d array.
///
/// # Safety
/// `nodename` NULL or NUL-terminated; `nspace` NULL or NUL-terminated; `procs`,
/// `nprocs` writable.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Resolve_peers(
    nodename: *const c_char,
    nspace: *const c_char,
    procs: *mut *mut pmix_proc_t,
    nprocs: *mut usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        if procs.is_null() || nprocs.is_null() {
            return Err(PMIX_ERR_BAD_PARAM);
        }
        let c = &s.client;
        // SAFETY: per the contract.
        let (node, ns) = unsafe { (c_str(nodename), c_str(nspace)) };
        if ns
            .as_deref()
            .is_some_and(|n| !n.is_empty() && n != c.nspace())
        {
            return Err(PMIX_ERR_NOT_FOUND);
        }
        let job = c.job();
        let node_id = match node {
            None => c.node_id(),
            Some(n) => job
                .node_names
                .iter()
                .position(|x| *x == n)
                .ok_or(PMIX_ERR_NOT_FOUND)? as u32,
        };
        let ranks = job.ranks_on(node_id);
        let arr = calloc::<pmix_proc_t>(ranks.len());
        if arr.is_null() && !ranks.is_empty() {
            return Err(PMIX_ERR_NOMEM);
        }
        for (i, &r) in ranks.iter().enumerate() {
            // SAFETY: `arr` has ranks.len() elements.
            unsafe { arr.add(i).write(proc_out(&ProcId::new(c.nspace(), r))) };
        }
        // SAFETY: both writable per the contract.
        unsafe {
            procs.write(arr);
            nprocs.write(ranks.len());
        }
        Ok(())
    })
}

/// The nodes hosting `nspace` (NULL or empty: this job), comma-separated, `malloc`'d.
///
/// # Safety
/// `nspace` NULL or NUL-terminated; `nodelist` writable.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Resolve_nodes(
    nspace: *const c_char,
    nodelist: *mut *mut c_char,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        if nodelist.is_null() {
            return Err(PMIX_ERR_BAD_PARAM);
        }
        // SAFETY: per the contract.
        let ns = unsafe { c_str(nspace) };
        if ns
            .as_deref()
            .is_some_and(|n| !n.is_empty() && n != s.client.nspace())
        {
            return Err(PMIX_ERR_NOT_FOUND);
        }
        let list = s.client.job().node_names.join(",");
        // SAFETY: writable per the contract.
        unsafe { nodelist.write(strdup(&list)) };
        Ok(())
    })
}

// ------------------------------------------------------------------ queries

/// One query: its keys and qualifiers.
struct Query {
    keys: Vec<String>,
    quals: Infos,
}

/// # Safety
/// `queries` NULL or `n` queries.
unsafe fn queries_in(queries: *const pmix_query_t, n: usize) -> Result<Vec<Query>, pmix_status_t> {
    if queries.is_null() || n == 0 {
        return Err(PMIX_ERR_BAD_PARAM);
    }
    // SAFETY: per the contract.
    let qs = unsafe { std::slice::from_raw_parts(queries, n) };
    let mut out = Vec::new();
    for q in qs {
        let mut keys = Vec::new();
        let mut k = q.keys;
        // SAFETY: a NULL-terminated array of strings per the header.
        unsafe {
            while !k.is_null() && !(*k).is_null() {
                keys.push(c_str(*k).unwrap_or_default());
                k = k.add(1);
            }
        }
        // SAFETY: `nqual` qualifiers per the header.
        let quals = unsafe { infos(q.qualifiers, q.nqual) };
        out.push(Query { keys, quals });
    }
    Ok(out)
}

/// Answers the queries cohort supports: group names, numbers and membership, process
/// set names, numbers and membership, namespaces. Partial answers succeed with
/// PMIX_ERR_PARTIAL_SUCCESS semantics folded into success when anything was answered.
fn answer(s: &State, queries: &[Query]) -> Result<Infos, pmix_status_t> {
    let c = &s.client;
    let mut out = Vec::new();
    let mut missed = 0usize;
    for q in queries {
        for key in &q.keys {
            let v = match key.as_str() {
                PMIX_QUERY_GROUP_NAMES => c
                    .group_names()
                    .ok()
                    .map(|n| PVal::Array(PMIX_STRING, n.into_iter().map(PVal::Str).collect())),
                PMIX_QUERY_NUM_GROUPS => c.group_names().ok().map(|n| PVal::Size(n.len() as u64)),
                PMIX_QUERY_GROUP_MEMBERSHIP => match find(&q.quals, PMIX_GROUP_ID) {
                    Some(PVal::Str(id)) => c.group_query(id).ok().map(|g| {
                        PVal::Array(PMIX_PROC, g.members.into_iter().map(PVal::Proc).collect())
                    }),
                    _ => None,
                },
                PMIX_QUERY_PSET_NAMES => c.pset_names().ok().map(|n| PVal::Str(n.join(","))),
                PMIX_QUERY_NUM_PSETS => c.pset_count().ok().map(|n| PVal::Size(n as u64)),
                PMIX_QUERY_PSET_MEMBERSHIP => match find(&q.quals, PMIX_PSET_NAME) {
                    Some(PVal::Str(name)) => c
                        .pset_members(name)
                        .ok()
                        .map(|m| PVal::Array(PMIX_PROC, m.into_iter().map(PVal::Proc).collect())),
                    _ => None,
                },
                PMIX_QUERY_NAMESPACES => c.namespaces().ok().map(|n| {
                    let names: Vec<&str> = n.iter().map(|n| n.as_str()).collect();
                    PVal::Str(names.join(","))
                }),
                _ => None,
            };
            match v {
                Some(v) => out.push((key.clone(), v)),
                None => missed += 1,
            }
        }
    }
    if out.is_empty() && missed > 0 {
        return Err(PMIX_ERR_NOT_FOUND);
    }
    Ok(out)
}

/// Blocking query: one result per key answered (the key is the query's key).
///
/// # Safety
/// `queries` `nqueries` queries; `results`, `nresults` writable.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Query_info(
    queries: *mut pmix_query_t,
    nqueries: usize,
    results: *mut *mut pmix_info_t,
    nresults: *mut usize,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        if results.is_null() || nresults.is_null() {
            return Err(PMIX_ERR_BAD_PARAM);
        }
        // SAFETY: forwarded contract.
        let qs = unsafe { queries_in(queries, nqueries) }?;
        let items = answer(&s, &qs)?;
        // SAFETY: forwarded contract.
        unsafe { results_out(&items, results, nresults) };
        Ok(())
    })
}

/// As `PMIx_Query_info`; `cbfunc` gets the results on the completion thread.
///
/// # Safety
/// `queries` `nqueries` queries; `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Query_info_nb(
    queries: *mut pmix_query_t,
    nqueries: usize,
    cbfunc: pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        cbfunc.ok_or(PMIX_ERR_BAD_PARAM)?;
        // SAFETY: forwarded contract.
        let qs = unsafe { queries_in(queries, nqueries) }?;
        // The answers come from blocking client calls: made on a helper thread, so
        // neither the caller nor the completion thread waits on them.
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("pmix-query".into())
            .spawn(move || {
                let _ = tx.send(answer(&s, &qs));
            })
            .map_err(|_| PMIX_ERR_OUT_OF_RESOURCE)?;
        info_callback(cbfunc, CbData(cbdata), async move {
            rx.await
                .unwrap_or(Err(PMIX_ERROR))
                .map(|answers| (PMIX_SUCCESS, answers))
        })
    })
}
