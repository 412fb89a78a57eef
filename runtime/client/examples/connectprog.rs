//! Rank program for the connect/disconnect integration tests
//! (`cluster-tests/tests/connect.rs`): `connectprog <scenario>`, run under `cohort run`
//! with 6 ranks. Each scenario asserts the documented behaviour inside the ranks and
//! exits non-zero naming the violated expectation; lines starting with `RESULT` are
//! compared across ranks by the tests.
//!
//! Spec: ../shared/spec/rfc0003-connect-disconnect.md (PMIx_Connect, PMIx_Disconnect
//! and their attributes) and pmix-standard-sets-and-groups.tex §Process Groups (how a
//! connection differs from a group).

#[macro_use]
mod support;
use support::*;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use cohort::{
    codes, keys, Client, CohortError, ConnectOpts, Connection, ConstructStatus, DisconnectOpts,
    Event, FenceOpts, ProcId, Range, Scope, Value,
};

/// Every wait is bounded, so a hang shows as a failure naming what was awaited.
const CALL_TIMEOUT: Duration = Duration::from_secs(40);

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let result = match scenario.as_str() {
        "subset" => subset(),
        "sequential" => sequential(),
        "parallel" => parallel(),
        "killed" => killed(),
        "timeout" => timeout(),
        "optional" => optional(),
        "xchg" => xchg(),
        "notify-each" => notify_each(),
        "badinput" => badinput(),
        other => Err(format!("unknown scenario {other:?}")),
    };
    exit_on_failure(&scenario, result);
}

fn opts() -> ConnectOpts {
    ConnectOpts {
        timeout: Some(CALL_TIMEOUT),
        ..Default::default()
    }
}

fn dopts() -> DisconnectOpts {
    DisconnectOpts {
        timeout: Some(CALL_TIMEOUT),
        ..Default::default()
    }
}

fn nspace_of(conn: &Connection) -> Result<String, String> {
    conn.nspace
        .clone()
        .ok_or_else(|| "the connection has no nspace".to_string())
}

fn event_nspace(ev: &Event) -> Option<&str> {
    cohort::info_get(&ev.info, keys::NSPACE).and_then(Value::as_str)
}

/// Drives the futures of `*_async` calls to completion on this thread.
fn block_on<T>(fut: impl Future<Output = T>) -> Result<T, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async { tokio::time::timeout(CALL_TIMEOUT * 2, fut).await })
        .map_err(|_| format!("no reply within {:?}", CALL_TIMEOUT * 2))
}

/// A connection's nspace addresses its members while connected: fence over
/// `{nspace,*}` with data, `get` of `{nspace, rank}`, notify (event code `hello`, one
/// per call) to the nspace.
fn use_connection(c: &Client, conn: &Connection, key: &str, hello: i32) -> R {
    let ns = nspace_of(conn)?;
    let me = conn.rank.ok_or("no rank")?;
    let n = conn.members.len() as u32;
    let (tx, hellos) = crossbeam_channel::unbounded();
    let handler = c.register_event_handler(Some(&[hello]), move |_, ev| {
        let _ = tx.send(ev.clone());
    });
    e2s(
        c.fence(
            &[ProcId::wildcard(ns.as_str())],
            FenceOpts {
                collect: true,
                timeout_ms: Some(40_000),
                ft_collective: false,
            },
        ),
        "fence over the connection",
    )?;
    for k in 0..n {
        let v = e2s(c.get(&ProcId::new(ns.as_str(), k), key, None), "get")?;
        let want = format!("v-{}", conn.members[k as usize].rank);
        check!(
            v == Value::Str(want.clone()),
            "get {{{ns},{k}}}/{key}: {v:?}, expected {want}"
        );
    }
    e2s(
        c.notify(hello, Range::Group(ns.clone()), vec![]),
        "notify to the connection",
    )?;
    let mut from = BTreeSet::new();
    while from.len() + 1 < n as usize {
        let ev = next_event(&hellos, "hello")?;
        from.insert(ev.source.clone());
    }
    check!(
        !from.contains(c.proc_id()) && from.iter().all(|q| conn.members.contains(q)),
        "hellos from {}",
        ranks(&from.into_iter().collect::<Vec<_>>())
    );
    // Every member is past its hello loop before anyone disconnects (so a late hello
    // still finds the connection).
    e2s(
        c.fence(&[ProcId::wildcard(ns.as_str())], FenceOpts::default()),
        "second fence",
    )?;
    let _ = me;
    c.deregister_event_handler(handler);
    Ok(())
}

/// rfc0003 PMIx_Connect over a subset of the job (ranks 1, 2, 4, 5: on every node with
/// three node servers), listed in a different order by each and with duplicates: one
/// nspace everywhere, rank = index in the canonical membership, and the nspace works
/// as an address until PMIx_Disconnect, after which it addresses nothing.
fn subset() -> R {
    let c = init()?;
    let me = c.rank();
    let listed = [1, 2, 4, 5];
    if !listed.contains(&me) {
        println!("RESULT outsider");
        return e2s(c.finalize(), "finalize");
    }
    e2s(c.put(Scope::Remote, "sub", format!("v-{me}")), "put")?;
    let mut procs: Vec<ProcId> = listed.iter().map(|&r| p(&c, r)).collect();
    procs.rotate_left(me as usize % 4);
    procs.push(p(&c, me));
    let conn = e2s(c.connect_procs(&procs, opts()), "connect")?;
    let ns = nspace_of(&conn)?;
    let members: Vec<ProcId> = listed.iter().map(|&r| p(&c, r)).collect();
    check!(conn.members == members, "members {}", ranks(&conn.members));
    check!(
        conn.status == ConstructStatus::Success && conn.failed.is_empty(),
        "status {:?}",
        conn.status
    );
    let rank = conn.rank.ok_or("no rank")?;
    check!(
        members[rank as usize] == *c.proc_id(),
        "rank {rank} is not my index in {}",
        ranks(&members)
    );
    check!(c.connections() == vec![ns.clone()], "{:?}", c.connections());
    println!("RANK job={me} ns={ns} rank={rank}");
    use_connection(&c, &conn, "sub", 7301)?;
    // The connection's nspace names its members in a list too: connecting over
    // `{nspace,*}` connects the same processes again, under a new nspace.
    let again = e2s(
        c.connect_procs(&[ProcId::wildcard(ns.as_str())], opts()),
        "connect over the connection",
    )?;
    let ns2 = nspace_of(&again)?;
    check!(ns2 != ns, "connect over {ns} reused it");
    check!(
        again.members == members && again.rank == Some(rank),
        "connect over {ns}: members {} rank {:?}",
        ranks(&again.members),
        again.rank
    );
    e2s(
        c.disconnect(&ns2, dopts()),
        "disconnect the second connection",
    )?;
    e2s(c.disconnect(&ns, dopts()), "disconnect")?;
    check!(c.connections().is_empty(), "{:?}", c.connections());
    match c.fence(&[ProcId::wildcard(ns.as_str())], FenceOpts::default()) {
        Err(CohortError::UnknownProc { .. }) => {}
        other => return Err(format!("fence over {ns} after disconnect: {other:?}")),
    }
    match c.get(
        &ProcId::new(ns.as_str(), 0),
        "sub",
        Some(Duration::from_secs(5)),
    ) {
        Err(CohortError::UnknownProc { .. }) => {}
        other => return Err(format!("get from {{{ns},0}} after disconnect: {other:?}")),
    }
    match c.disconnect(&ns, dopts()) {
        Err(CohortError::GroupNotFound { id }) if id == ns => {}
        other => return Err(format!("second disconnect: {other:?}")),
    }
    println!("RESULT members={} ns={ns}", ranks(&members));
    e2s(c.finalize(), "finalize")
}

/// Two connects of the same processes, one after the other and without a connect id
/// (the second while the first is still connected): each gets its own nspace; after
/// disconnecting both, a third connect gets yet another. `{nspace,*}` and the whole
/// list name the same processes: half the ranks pass one, half the other.
fn sequential() -> R {
    let c = init()?;
    let me = c.rank();
    e2s(c.put(Scope::Remote, "seq", format!("v-{me}")), "put")?;
    let procs = if me % 2 == 0 {
        vec![ProcId::wildcard(c.nspace())]
    } else {
        (0..c.size()).rev().map(|r| p(&c, r)).collect()
    };
    let first = e2s(c.connect_procs(&procs, opts()), "first connect")?;
    let second = e2s(c.connect_procs(&procs, opts()), "second connect")?;
    let (a, b) = (nspace_of(&first)?, nspace_of(&second)?);
    check!(a != b, "both connects got {a}");
    check!(first.rank == Some(me) && second.rank == Some(me), "ranks");
    use_connection(&c, &second, "seq", 7302)?;
    use_connection(&c, &first, "seq", 7303)?;
    e2s(c.disconnect(&b, dopts()), "disconnect second")?;
    e2s(c.disconnect(&a, dopts()), "disconnect first")?;
    let third = e2s(c.connect_procs(&procs, opts()), "third connect")?;
    let t = nspace_of(&third)?;
    check!(t != a && t != b, "third connect reused {t}");
    e2s(c.disconnect(&t, dopts()), "disconnect third")?;
    println!("RESULT ns={a},{b},{t}");
    e2s(c.finalize(), "finalize")
}

/// rfc0003 PMIX_CONNECT_ID: two connects of the same processes in flight together,
/// told apart by their ids; ranks start them in opposite orders.
fn parallel() -> R {
    let c = init()?;
    let me = c.rank();
    let all = vec![ProcId::wildcard(c.nspace())];
    let with_id = |id: &str| ConnectOpts {
        connect_id: Some(id.into()),
        ..opts()
    };
    let (x, y) = if me % 2 == 0 {
        let x = c.connect_procs_async(&all, with_id("x"));
        let y = c.connect_procs_async(&all, with_id("y"));
        block_on(async { (x.await, y.await) })?
    } else {
        let y = c.connect_procs_async(&all, with_id("y"));
        let x = c.connect_procs_async(&all, with_id("x"));
        block_on(async { (x.await, y.await) })?
    };
    let (x, y) = (e2s(x, "connect x")?, e2s(y, "connect y")?);
    let (nx, ny) = (nspace_of(&x)?, nspace_of(&y)?);
    check!(nx != ny, "both ids got {nx}");
    let dx = c.disconnect_async(&nx, dopts());
    let dy = c.disconnect_async(&ny, dopts());
    let (dx, dy) = block_on(async { (dx.await, dy.await) })?;
    e2s(dx, "disconnect x")?;
    e2s(dy, "disconnect y")?;
    println!("RESULT x={nx} y={ny}");
    e2s(c.finalize(), "finalize")
}

/// A member killed while connected (the last rank aborts right after connecting), on
/// two connections of the same processes: a strict one and one with
/// PMIX_CONNECT_EARLY_TERM_ALLOWED.
///
/// rfc0003 PMIx_Disconnect: "Processes that terminate while connected to other
/// processes will generate a termination error event that will be reported to any
/// process in the connected group that has registered for such events" → every
/// survivor gets PROC_TERMINATED naming the dead rank and the strict nspace. PMIx_Connect:
/// "All processes are required to disconnect from the nspace prior to terminating
/// unless the PMIX_CONNECT_EARLY_TERM_ALLOWED directive is provided", and a disconnect
/// completes only once all members called it (sets-and-groups §Destruct procedure) →
/// the survivors' disconnect of the strict connection fails with ProcTerminated naming
/// the dead rank. With EARLY_TERM_ALLOWED, "do not generate an error": no event for
/// that nspace, a fence over it completes among the survivors, and so does their
/// disconnect.
fn killed() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let dead = p(&c, n - 1);
    let terminated = event_channel(&c, &[codes::PROC_TERMINATED]);
    let all = vec![ProcId::wildcard(c.nspace())];
    let strict = e2s(
        c.connect_procs(
            &all,
            ConnectOpts {
                connect_id: Some("strict".into()),
                ..opts()
            },
        ),
        "strict connect",
    )?;
    let early = e2s(
        c.connect_procs(
            &all,
            ConnectOpts {
                connect_id: Some("early".into()),
                early_term_allowed: true,
                ..opts()
            },
        ),
        "early-term connect",
    )?;
    if me == n - 1 {
        std::process::abort();
    }
    let (s, e) = (nspace_of(&strict)?, nspace_of(&early)?);
    let ev = next_event(&terminated, "PROC_TERMINATED")?;
    check!(
        ev.affected == vec![dead.clone()] && ev.source == dead,
        "terminated event about {:?} from {}",
        ev.affected,
        ev.source
    );
    check!(
        event_nspace(&ev) == Some(s.as_str()),
        "terminated event names {:?}, expected {s}",
        event_nspace(&ev)
    );
    // PMIX_CONNECT_EARLY_TERM_ALLOWED: "The host RM and PMIx server are responsible
    // for adjusting completion requirements on any ongoing or future collectives for
    // this nspace": a fence over it completes among the survivors; over the strict
    // connection it fails naming the dead rank.
    let fence = FenceOpts {
        collect: false,
        timeout_ms: Some(40_000),
        ft_collective: false,
    };
    e2s(
        c.fence(&[ProcId::wildcard(e.as_str())], fence.clone()),
        "fence over the early-term connection",
    )?;
    match c.fence(&[ProcId::wildcard(s.as_str())], fence) {
        Err(CohortError::ProcTerminated { procs, .. }) if procs == vec![dead.clone()] => {}
        other => return Err(format!("fence over the strict connection: {other:?}")),
    }
    e2s(
        c.disconnect(&e, dopts()),
        "disconnect early-term connection",
    )?;
    // Both connections' events would come from the same termination, which the
    // strict event proves this rank's server handled: none for the other may be here.
    while let Ok(ev) = terminated.try_recv() {
        check!(
            event_nspace(&ev) != Some(e.as_str()),
            "a termination event for the early-term connection {e}"
        );
    }
    match c.disconnect(&s, dopts()) {
        Err(CohortError::ProcTerminated { procs, .. }) if procs == vec![dead.clone()] => {}
        other => {
            return Err(format!(
                "strict disconnect: expected ProcTerminated, got {other:?}"
            ))
        }
    }
    println!("RESULT survived strict-event={s} early-disconnected={e}");
    e2s(c.finalize(), "finalize")
}

/// PMIX_TIMEOUT: the last rank never calls; the others' connect fails with a Timeout
/// naming it (never a hang).
fn timeout() -> R {
    let c = init()?;
    let n = c.size();
    if c.rank() == n - 1 {
        std::thread::sleep(Duration::from_secs(3));
        return e2s(c.finalize(), "finalize");
    }
    let all = vec![ProcId::wildcard(c.nspace())];
    let o = ConnectOpts {
        timeout: Some(Duration::from_millis(500)),
        ..Default::default()
    };
    match c.connect_procs(&all, o) {
        Err(CohortError::Timeout {
            missing,
            timeout_ms,
            op,
        }) => {
            check!(timeout_ms == 500, "timeout_ms {timeout_ms}");
            check!(missing == vec![p(&c, n - 1)], "missing {}", ranks(&missing));
            check!(op.starts_with("connect "), "op {op:?}");
        }
        other => return Err(format!("expected Timeout, got {other:?}")),
    }
    check!(c.connections().is_empty(), "{:?}", c.connections());
    println!("RESULT timeout-ok");
    e2s(c.finalize(), "finalize")
}

/// The last rank ends without connecting. rfc0003: "By default, any participant that
/// fails to call connect prior to terminating will cause the operation to return a
/// failed status to all other participants - this can be modified by including the
/// PMIX_CONNECT_OPTIONAL directive": first a default connect (fails naming it), then
/// an optional one (partial result without it).
fn optional() -> R {
    let c = init()?;
    let n = c.size();
    let dead = p(&c, n - 1);
    if c.rank() == n - 1 {
        return e2s(c.finalize(), "finalize");
    }
    let all: Vec<ProcId> = (0..n).map(|r| p(&c, r)).collect();
    match c.connect_procs(&all, opts()) {
        Err(CohortError::ProcTerminated { procs, .. }) if procs == vec![dead.clone()] => {}
        other => {
            return Err(format!(
                "required connect: expected ProcTerminated, got {other:?}"
            ))
        }
    }
    let conn = e2s(
        c.connect_procs(
            &all,
            ConnectOpts {
                optional: true,
                ..opts()
            },
        ),
        "optional connect",
    )?;
    check!(
        conn.status == ConstructStatus::PartialSuccess,
        "status {:?}",
        conn.status
    );
    check!(
        conn.failed == vec![dead.clone()],
        "failed {}",
        ranks(&conn.failed)
    );
    let members: Vec<ProcId> = all.iter().filter(|q| **q != dead).cloned().collect();
    check!(conn.members == members, "members {}", ranks(&conn.members));
    check!(conn.rank == Some(c.rank()), "rank {:?}", conn.rank);
    let ns = nspace_of(&conn)?;
    e2s(c.disconnect(&ns, dopts()), "disconnect")?;
    println!("RESULT partial ns={ns} members={}", ranks(&members));
    e2s(c.finalize(), "finalize")
}

/// PMIX_CONNECT_XCHG_ONLY: data exchanged among the participants, no nspace or rank.
fn xchg() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    e2s(c.put(Scope::Remote, "x", format!("v-{me}")), "put")?;
    let evens: Vec<ProcId> = (0..n).filter(|r| r % 2 == 0).map(|r| p(&c, r)).collect();
    let odds: Vec<ProcId> = (0..n).filter(|r| r % 2 == 1).map(|r| p(&c, r)).collect();
    let mine = if me % 2 == 0 { &evens } else { &odds };
    let conn = e2s(
        c.connect_procs(
            mine,
            ConnectOpts {
                xchg_only: true,
                ..opts()
            },
        ),
        "exchange-only connect",
    )?;
    check!(
        conn.nspace.is_none() && conn.rank.is_none(),
        "exchange only, yet nspace {:?} rank {:?}",
        conn.nspace,
        conn.rank
    );
    check!(conn.members == *mine, "members {}", ranks(&conn.members));
    for q in mine {
        let v = e2s(c.get(q, "x", Some(Duration::from_secs(10))), "get")?;
        check!(v == Value::Str(format!("v-{}", q.rank)), "{q}: {v:?}");
    }
    check!(c.connections().is_empty(), "{:?}", c.connections());
    println!("RESULT xchg-ok");
    e2s(c.finalize(), "finalize")
}

/// rfc0003 PMIX_CONNECT_NOTIFY_EACH: PROC_HAS_CONNECTED from each other participant
/// when it calls connect, PROC_HAS_DISCONNECTED when it calls disconnect, each naming
/// the connection's nspace.
fn notify_each() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let connected = event_channel(&c, &[codes::PROC_HAS_CONNECTED]);
    let disconnected = event_channel(&c, &[codes::PROC_HAS_DISCONNECTED]);
    let all = vec![ProcId::wildcard(c.nspace())];
    let conn = e2s(
        c.connect_procs(
            &all,
            ConnectOpts {
                notify_each: true,
                ..opts()
            },
        ),
        "connect",
    )?;
    let ns = nspace_of(&conn)?;
    let others: BTreeSet<ProcId> = (0..n).filter(|&r| r != me).map(|r| p(&c, r)).collect();
    let collect = |rx: &crossbeam_channel::Receiver<Event>, what: &str| -> Result<(), String> {
        let mut from = BTreeSet::new();
        while from.len() < others.len() {
            let ev = next_event(rx, what)?;
            check!(
                event_nspace(&ev) == Some(ns.as_str())
                    && cohort::info_get(&ev.info, keys::EVENT_AFFECTED_PROC)
                        == Some(&Value::Procs(vec![ev.source.clone()])),
                "{what} event {ev:?}"
            );
            check!(
                from.insert(ev.source.clone()),
                "two {what} from {}",
                ev.source
            );
        }
        check!(
            from == others,
            "{what} from {}",
            ranks(&from.into_iter().collect::<Vec<_>>())
        );
        Ok(())
    };
    collect(&connected, "PROC_HAS_CONNECTED")?;
    e2s(
        c.disconnect(
            &ns,
            DisconnectOpts {
                notify_each: true,
                ..dopts()
            },
        ),
        "disconnect",
    )?;
    collect(&disconnected, "PROC_HAS_DISCONNECTED")?;
    println!("RESULT notify-each ns={ns}");
    e2s(c.finalize(), "finalize")
}

/// Typed errors for bad input; none of them starts a collective.
fn badinput() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let expect = |what: &str,
                  r: Result<Connection, CohortError>,
                  ok: &dyn Fn(&CohortError) -> bool| match r {
        Err(e) if ok(&e) => Ok(()),
        other => Err(format!("{what}: got {other:?}")),
    };
    expect(
        "empty list",
        c.connect_procs(&[], opts()),
        &|e| matches!(e, CohortError::BadRequest(m) if m.contains("empty")),
    )?;
    let bogus = p(&c, n + 5);
    expect(
        "rank past the job",
        c.connect_procs(&[p(&c, me), bogus.clone()], opts()),
        &|e| matches!(e, CohortError::UnknownProc { proc, .. } if *proc == bogus),
    )?;
    let stranger = ProcId::new("no-such-nspace", 0);
    expect(
        "unknown nspace",
        c.connect_procs(&[p(&c, me), stranger.clone()], opts()),
        &|e| matches!(e, CohortError::UnknownProc { proc, .. } if *proc == stranger),
    )?;
    let other = p(&c, (me + 1) % n);
    expect(
        "caller not listed",
        c.connect_procs(&[other], opts()),
        &|e| matches!(e, CohortError::BadRequest(m) if m.contains("not among") && m.contains(&c.proc_id().to_string())),
    )?;
    expect(
        "exchange only and optional",
        c.connect_procs(
            &[p(&c, me)],
            ConnectOpts {
                xchg_only: true,
                optional: true,
                ..opts()
            },
        ),
        &|e| matches!(e, CohortError::NotSupported(_)),
    )?;
    match c.disconnect("no-such-connection", dopts()) {
        Err(CohortError::GroupNotFound { id }) if id == "no-such-connection" => {}
        other => return Err(format!("unknown nspace on disconnect: {other:?}")),
    }
    let dd = block_on(c.disconnect_async("still-none", dopts()))?;
    match dd {
        Err(CohortError::GroupNotFound { id }) if id == "still-none" => {}
        other => return Err(format!("unknown nspace on async disconnect: {other:?}")),
    }
    // A plain group is not a connection: disconnect refuses it, destruct still works.
    let all = vec![ProcId::wildcard(c.nspace())];
    e2s(
        c.group_construct("plain-group", &all, Default::default()),
        "construct",
    )?;
    match c.disconnect("plain-group", dopts()) {
        Err(CohortError::GroupNotFound { id }) if id == "plain-group" => {}
        other => return Err(format!("disconnect of a plain group: {other:?}")),
    }
    e2s(c.group_destruct("plain-group", None), "destruct")?;
    // Members of a connection cannot leave it one by one.
    let conn = e2s(c.connect_procs(&all, opts()), "connect")?;
    let ns = nspace_of(&conn)?;
    match c.group_leave(&ns) {
        Err(CohortError::BadRequest(m)) if m.contains("together") => {}
        other => return Err(format!("leave of a connection: {other:?}")),
    }
    e2s(c.disconnect(&ns, dopts()), "disconnect")?;
    println!("RESULT badinput-ok");
    e2s(c.finalize(), "finalize")
}
