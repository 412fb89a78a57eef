//! Events: `PMIx_Register_event_handler`, `PMIx_Deregister_event_handler` and
//! `PMIx_Notify_event` on cohort's event handlers and notifications.
//!
//! Handlers run on the cohort client's event thread in PMIx's order (those registered
//! for the event's code alone, then for several codes, then for every code; each in
//! registration order). Each gets the event's info (plus `PMIX_EVENT_AFFECTED_PROCS`
//! when the event names processes) and a completion callback, and the next handler
//! gets the event only once it called that callback (during the call or later, from
//! any thread), unless with `PMIX_EVENT_ACTION_COMPLETE`, which ends the chain. A
//! handler that never calls it holds that event's chain for good; other events go on.
//! The results a handler gives its callback reach the handlers after it (`results`),
//! aggregated by key: a key given again takes the later value.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use cohort::{ChainResume, Client, Event, EventFlow, Range};

use crate::types::*;
use crate::value::*;
use crate::*;

/// The info and earlier results a handler was given, released when it calls its
/// completion callback, and the event's chain, which that callback lets go on (or
/// ends).
struct Delivery {
    info: *mut pmix_info_t,
    ninfo: usize,
    results: *mut pmix_info_t,
    nresults: usize,
    resume: ChainResume,
}

/// The completion callback handed to handlers: releases the event's info, lets the
/// chain go on with the handler's `results` added to the chain's (or ends it, with
/// `PMIX_EVENT_ACTION_COMPLETE`) and calls the handler's own callback, if any (which
/// may release those results: they are copied first).
unsafe extern "C" fn event_done(
    status: pmix_status_t,
    results: *mut pmix_info_t,
    nresults: usize,
    cbfunc: pmix_op_cbfunc_t,
    thiscbdata: *mut c_void,
    notification_cbdata: *mut c_void,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !notification_cbdata.is_null() {
            // SAFETY: the Delivery boxed for this handler call, released once here.
            let d = unsafe { Box::from_raw(notification_cbdata.cast::<Delivery>()) };
            // SAFETY: the arrays we built for it.
            unsafe {
                info_array_free(d.info, d.ninfo);
                info_array_free(d.results, d.nresults);
            }
            let flow = match status {
                PMIX_EVENT_ACTION_COMPLETE => EventFlow::Stop,
                _ => EventFlow::Continue,
            };
            let given = match results.is_null() {
                true => Vec::new(),
                // SAFETY: the handler's results: `nresults` infos (PMIx's contract).
                false => unsafe { infos(results, nresults) },
            };
            let given = given.iter().map(|(k, v)| (k.clone(), to_cohort(v)));
            d.resume.proceed_with(flow, given.collect());
        }
        if let Some(cb) = cbfunc {
            // SAFETY: the handler's own callback with its data.
            unsafe { cb(PMIX_SUCCESS, thiscbdata) };
        }
    }));
}

/// The info a handler gets for `e`.
fn event_info(e: &Event) -> Vec<(String, PVal)> {
    let mut info: Vec<(String, PVal)> = e
        .info
        .iter()
        .map(|(k, v)| (k.clone(), typed_for_key(k, from_cohort(v))))
        .collect();
    if !e.affected.is_empty() && find(&info, PMIX_EVENT_AFFECTED_PROCS).is_none() {
        info.push((
            PMIX_EVENT_AFFECTED_PROCS.to_string(),
            PVal::Array(
                PMIX_PROC,
                e.affected.iter().cloned().map(PVal::Proc).collect(),
            ),
        ));
        if e.affected.len() == 1 && find(&info, PMIX_EVENT_AFFECTED_PROC).is_none() {
            info.push((
                PMIX_EVENT_AFFECTED_PROC.to_string(),
                PVal::Proc(e.affected[0].clone()),
            ));
        }
    }
    info
}

/// Calls handler `h` (registration `id`) with event `e`; the chain goes on once it
/// calls its completion callback (`event_done`, which gets `resume`).
fn deliver(h: HandlerFn, id: usize, e: &Event, resume: ChainResume) {
    let source = proc_out(&e.source);
    let (info, ninfo) = info_array_out(&event_info(e));
    let earlier: Vec<(String, PVal)> = resume
        .results()
        .iter()
        .map(|(k, v)| (k.clone(), from_cohort(v)))
        .collect();
    let (results, nresults) = match earlier.is_empty() {
        true => (std::ptr::null_mut(), 0),
        false => info_array_out(&earlier),
    };
    let delivery = Box::into_raw(Box::new(Delivery {
        info,
        ninfo,
        results,
        nresults,
        resume,
    }));
    // SAFETY: the registrant's handler, with arguments valid until it calls
    // `event_done` (which releases them).
    unsafe {
        h(
            id,
            e.code,
            &source,
            info,
            ninfo,
            results,
            nresults,
            Some(event_done),
            delivery.cast(),
        )
    };
}

type HandlerFn = unsafe extern "C" fn(
    usize,
    pmix_status_t,
    *const pmix_proc_t,
    *mut pmix_info_t,
    usize,
    *mut pmix_info_t,
    usize,
    pmix_event_notification_cbfunc_fn_t,
    *mut c_void,
);

/// Registers `evhdlr` for `codes` (none: every event). Its reference goes to `cbfunc`
/// on the completion thread when given, else is the (non-negative) return value. On
/// an error (returned), `cbfunc` is not called.
///
/// # Safety
/// `codes` NULL or `ncodes` codes; `info` NULL or `ninfo` infos; `evhdlr` may be called
/// on the event thread with the event until deregistered; `cbfunc` once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Register_event_handler(
    codes: *mut pmix_status_t,
    ncodes: usize,
    _info: *mut pmix_info_t,
    _ninfo: usize,
    evhdlr: pmix_notification_fn_t,
    cbfunc: pmix_hdlr_reg_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    let mut refid = 0usize;
    let st = guard(|| {
        let s = state()?;
        let h = evhdlr.ok_or(PMIX_ERR_BAD_PARAM)?;
        if codes.is_null() && ncodes > 0 {
            return Err(PMIX_ERR_BAD_PARAM);
        }
        let codes: Option<Vec<i32>> = (ncodes > 0)
            // SAFETY: `codes` points to `ncodes` codes per the contract.
            .then(|| unsafe { std::slice::from_raw_parts(codes, ncodes) }.to_vec());
        refid = s.next_handler.fetch_add(1, Ordering::Relaxed);
        let id = refid;
        let handler = move |_: &Client, e: &Event, resume: ChainResume| {
            // A panic here (not the handler's: that is C) leaves the chain to the
            // dropped resume, which ends it.
            let _ = catch_unwind(AssertUnwindSafe(|| deliver(h, id, e, resume)));
        };
        let hid = s
            .client
            .register_event_chain_deferred(codes.as_deref(), handler);
        lock(&s.handlers).insert(id, hid);
        Ok(())
    });
    // An error is returned, and the callback not called (the PMIx convention).
    if st != PMIX_SUCCESS {
        return st;
    }
    let Some(cb) = cbfunc else {
        return pmix_status_t::try_from(refid).unwrap_or(PMIX_ERROR);
    };
    let data = CbData(cbdata);
    let done = complete(std::future::ready(()), move |()| {
        let data = data;
        // SAFETY: the caller's callback, once, with its data.
        unsafe { cb(PMIX_SUCCESS, refid, data.0) };
    });
    done.err().unwrap_or(PMIX_SUCCESS)
}

/// Removes handler `evhdlr_ref`; `cbfunc` (if any) gets the status on the completion
/// thread.
///
/// # Safety
/// `cbfunc` may be called once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Deregister_event_handler(
    evhdlr_ref: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    let st = guard(|| {
        let s = state()?;
        let id = lock(&s.handlers)
            .remove(&evhdlr_ref)
            .ok_or(PMIX_ERR_NOT_FOUND)?;
        s.client.deregister_event_handler(id);
        Ok(())
    });
    if st != PMIX_SUCCESS || cbfunc.is_none() {
        return st;
    }
    let r = op_callback(cbfunc, CbData(cbdata), std::future::ready(st));
    r.err().unwrap_or(PMIX_SUCCESS)
}

/// Raises event `status` to `range` with `info` (PMIX_EVENT_CUSTOM_RANGE names the
/// processes of PMIX_RANGE_CUSTOM). The source is always this process. Blocking when
/// `cbfunc` is NULL, else `cbfunc` gets the status on the completion thread.
///
/// # Safety
/// `source` NULL or a process; `info` NULL or `ninfo` infos; `cbfunc` may be called
/// once with `cbdata`.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Notify_event(
    status: pmix_status_t,
    _source: *const pmix_proc_t,
    range: pmix_data_range_t,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    guard(|| {
        let s = state()?;
        // SAFETY: per the contract.
        let info = unsafe { infos(info, ninfo) };
        let c = &s.client;
        let range = match u32::from(range) {
            PMIX_RANGE_LOCAL => Range::Local,
            PMIX_RANGE_NAMESPACE | PMIX_RANGE_UNDEF => Range::Namespace(c.nspace().into()),
            PMIX_RANGE_SESSION | PMIX_RANGE_GLOBAL | PMIX_RANGE_RM => Range::Session,
            PMIX_RANGE_PROC_LOCAL => Range::Procs(vec![c.proc_id().clone()]),
            PMIX_RANGE_CUSTOM => {
                let procs = match find(&info, PMIX_EVENT_CUSTOM_RANGE) {
                    v @ Some(PVal::Array(..) | PVal::Proc(_)) => crate::groups::procs_of(v),
                    _ => return Err(PMIX_ERR_BAD_PARAM),
                };
                Range::Procs(expand(c, procs))
            }
            _ => return Err(PMIX_ERR_BAD_PARAM),
        };
        let info: cohort::Info = info
            .iter()
            .filter(|(k, _)| k != PMIX_EVENT_CUSTOM_RANGE)
            .map(|(k, v)| (k.clone(), to_cohort(v)))
            .collect();
        if cbfunc.is_none() {
            return c.notify(status, range, info).map_err(|e| status_of(&e));
        }
        let fut = c.notify_async(status, range, info);
        op_callback(cbfunc, CbData(cbdata), status_after(fut))
    })
}
