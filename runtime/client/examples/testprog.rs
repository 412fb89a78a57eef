//! Rank program for the integration tests: `testprog <scenario>`, run under
//! `cohort run`. Each scenario asserts the documented behaviour from inside the ranks
//! and exits non-zero with a message naming the violated expectation; lines starting
//! with `RESULT` are compared across ranks by the tests.
//!
//! Spec references: ../shared/spec/group-construction-methods.txt (§6.4.3.1 collective,
//! §6.4.3.2 bootstrap, §6.4.3.3 invite), pmix-standard-sets-and-groups.tex,
//! rfc0033-pmix-groups.md.

#[macro_use]
mod support;
use support::*;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use cohort::{
    codes, Client, CohortError, ConstructOpts, ConstructStatus, Event, FenceOpts, ProcId, Range,
    Scope, Value,
};

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let result = match scenario.as_str() {
        "construct" => alone(construct_on),
        "fence" => alone(fence_on),
        "modex" => modex(),
        "addmembers" => alone(addmembers_on),
        "groups" => groups(),
        "optional" => optional(),
        "required" => required(),
        "timeout" => timeout(),
        "concurrent" => concurrent(),
        "reuse" => reuse(),
        "leave" => leave(),
        "events" => events(),
        "badinput" => badinput(),
        "dies-before-fence" => dies_before_fence(),
        "dies-in-construct" => dies_in_construct(),
        "badframe" => badframe(),
        "private-socket" => private_socket(),
        "connect-only" => connect_only(),
        "bootstrap" => bootstrap(),
        "bootstrap-count-mismatch" => bootstrap_count_mismatch(),
        "bootstrap-member-dies" => bootstrap_member_dies(),
        "invite" => invite(),
        "invite-blocking-join" => invite_blocking_join(),
        "invite-decline-drop" => invite_decline_drop(),
        "invite-decline-replace" => invite_decline_replace(),
        "invite-abort" => invite_abort(),
        "invite-member-dies" => invite_member_dies(),
        "invite-leader-dies" => invite_leader_dies(),
        "construct-leader-dies-abort" => construct_leader_dies_abort(),
        "collective-member-dies-notify" => collective_member_dies_notify(),
        "bootstrap-leader-missing" => bootstrap_leader_missing(),
        "invite-timeout" => invite_timeout(),
        "bootstrap-member-dies-required" => bootstrap_member_dies_required(),
        "invite-decline-continue" => invite_decline_continue(),
        "collective-member-dies-notify-anyone" => collective_member_dies_notify_anyone(),
        "sim-compare" => sim_compare(),
        "lost-interior" => lost_interior(),
        "construct-after-loss" => construct_after_loss(),
        "construct-after-rendezvous-loss" => construct_after_rendezvous_loss(),
        "publish-after-loss" => publish_after_loss(),
        "publish-persistence" => publish_persistence(),
        "spawn" => spawn(),
        "spawn-child" => spawn_child(),
        "spawn-wait" => spawn_wait(),
        "spawn-loss" => spawn_loss(),
        "spawn-run" => spawn_run(),
        "spawn-timeout" => spawn_timeout(),
        "spawn-cancel-start" => spawn_cancel_start(),
        "spawn-bind" => spawn_bind(),
        "spawn-pset" => spawn_pset(),
        "spawn-pset-loss" => spawn_pset_loss(),
        "spawn-cwd" => spawn_cwd(),
        "universe" => universe(),
        "frozen-server" => frozen_server(),
        "two-frozen" => two_frozen(),
        "cut-off" => cut_off(),
        "two-cut-off" => two_cut_off(),
        "cut-apart" => partial_cut(),
        "failure-views" => failure_views(),
        "ft-fence" => ft_fence(),
        "fence-after-timeout" => fence_after_timeout(),
        "idle-cpu" => idle_cpu(),
        "fd-limits" => fd_limits(),
        other => Err(format!("unknown scenario {other:?}")),
    };
    exit_on_failure(&scenario, result);
}

fn all(c: &Client) -> Vec<ProcId> {
    (0..c.size()).map(|r| p(c, r)).collect()
}

fn ctx() -> ConstructOpts {
    ConstructOpts {
        assign_context_id: true,
        timeout_ms: Some(60_000),
        ..Default::default()
    }
}

/// Collective method across nodes: leaders list all leaders in different orders; the
/// result is canonical, identical everywhere, and carries group info and posted data
/// readable without a fence, also after destruct.
fn construct_on(c: &Client) -> R {
    let me = c.rank();
    let n = c.size();
    e2s(c.put(Scope::Remote, "ep", format!("ep-{me}")), "put")?;
    let mut leaders = all(c);
    let len = leaders.len();
    leaders.rotate_left(me as usize % len);
    let mut opts = ctx();
    opts.group_info = vec![("color".into(), Value::U32(me * 7))];
    let g = e2s(c.group_construct("grp-a", &leaders, opts), "construct")?;
    check!(
        g.status == ConstructStatus::Success,
        "status {:?}",
        g.status
    );
    check!(
        g.members == all(c),
        "membership not canonical: {}",
        ranks(&g.members)
    );
    let cid = g.context_id.ok_or("no context id")?;
    check!(
        g.group_info.len() == n as usize,
        "group info of {} members",
        g.group_info.len()
    );
    for (pr, info) in &g.group_info {
        check!(
            info == &vec![("color".to_string(), Value::U32(pr.rank * 7))],
            "group info of {pr}: {info:?}"
        );
    }
    let other = p(c, (me + 1) % n);
    let ep = e2s(c.get(&other, "ep", Some(Duration::from_secs(5))), "get ep")?;
    check!(
        ep == Value::Str(format!("ep-{}", other.rank)),
        "endpoint of {other}: {ep:?}"
    );
    let by_group_rank = e2s(
        c.get(
            &ProcId::new("grp-a", (me + 1) % n),
            "color",
            Some(Duration::from_secs(5)),
        ),
        "get by group rank",
    )?;
    check!(
        by_group_rank == Value::U32(((me + 1) % n) * 7),
        "group-rank get: {by_group_rank:?}"
    );
    let names = e2s(c.group_names(), "group names")?;
    check!(names == vec!["grp-a".to_string()], "group names {names:?}");
    println!("RESULT members={} ctx={cid}", ranks(&g.members));
    e2s(
        c.group_destruct("grp-a", Some(Duration::from_secs(60))),
        "destruct",
    )?;
    // still readable after destruct
    let ep = e2s(
        c.get(&other, "ep", Some(Duration::from_secs(5))),
        "get after destruct",
    )?;
    check!(
        ep == Value::Str(format!("ep-{}", other.rank)),
        "after destruct: {ep:?}"
    );
    Ok(())
}

/// Fence over all (with data), over a subset, and over a group `{g,*}`.
fn fence_on(c: &Client) -> R {
    let me = c.rank();
    let n = c.size();
    // One node: whole-job fences meet in shared memory; the checks below then cover
    // that path (data put before the fence readable right after it, subsets and group
    // fences through the node server alongside).
    check!(
        c.fences_in_shared_memory() == (c.job().num_nodes == 1),
        "node-local fences: {} on {} node(s)",
        c.fences_in_shared_memory(),
        c.job().num_nodes
    );
    e2s(c.put(Scope::Global, "payload", vec![me as u8; 1024]), "put")?;
    let collect = FenceOpts {
        collect: true,
        timeout_ms: Some(60_000),
        ft_collective: false,
    };
    e2s(c.fence(&[], collect.clone()), "fence all")?;
    for r in 0..n {
        let v = e2s(
            c.get(&p(c, r), "payload", Some(Duration::from_secs(5))),
            "get",
        )?;
        check!(
            v == Value::Bytes(vec![r as u8; 1024].into()),
            "payload of rank {r}"
        );
    }
    // subset: even ranks only, twice in a row (sequence numbering)
    let evens: Vec<ProcId> = (0..n).filter(|r| r % 2 == 0).map(|r| p(c, r)).collect();
    if me % 2 == 0 {
        for _ in 0..2 {
            e2s(c.fence(&evens, FenceOpts::default()), "fence evens")?;
        }
    }
    // group-addressed fence
    let odds: Vec<ProcId> = (0..n).filter(|r| r % 2 == 1).map(|r| p(c, r)).collect();
    if me % 2 == 1 {
        e2s(c.group_construct("odds", &odds, ctx()), "construct odds")?;
        e2s(
            c.fence(&[ProcId::wildcard("odds")], collect),
            "fence {odds,*}",
        )?;
        e2s(c.group_destruct("odds", None), "destruct odds")?;
    }
    e2s(c.fence(&[], FenceOpts::default()), "final fence")?;
    println!("RESULT fence-ok");
    Ok(())
}

/// Data not collected by any fence is fetched on demand from its node server; a get
/// for data that never comes times out naming the process.
fn modex() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    if me == 1 {
        // rank 0 times out on us first; we only commit after the fence
        e2s(c.fence(&[], FenceOpts::default()), "fence")?;
    }
    if me == 0 {
        match c.get(&p(&c, 1), "late", Some(Duration::from_millis(300))) {
            Err(CohortError::Timeout { missing, .. }) => {
                check!(missing == vec![p(&c, 1)], "timeout names {missing:?}")
            }
            other => return Err(format!("expected a timeout, got {other:?}")),
        }
    }
    e2s(c.put(Scope::Remote, "late", format!("v{me}")), "put")?;
    e2s(c.commit(), "commit")?;
    if me != 1 {
        e2s(c.fence(&[], FenceOpts::default()), "fence")?;
    }
    for r in 0..n {
        if r == me {
            continue;
        }
        let v = e2s(
            c.get(&p(&c, r), "late", Some(Duration::from_secs(10))),
            "get",
        )?;
        check!(v == Value::Str(format!("v{r}")), "rank {r}: {v:?}");
        match c.get(&p(&c, r), "never-posted", Some(Duration::from_secs(10))) {
            Err(CohortError::NotFound { proc, key }) => {
                check!(
                    proc == p(&c, r) && key == "never-posted",
                    "not-found names {proc} {key}"
                )
            }
            other => return Err(format!("expected NotFound, got {other:?}")),
        }
    }
    let size = e2s(
        c.get(&ProcId::wildcard(c.nspace()), "pmix.job.size", None),
        "job size",
    )?;
    check!(size == Value::U32(n), "job size {size:?}");
    println!("RESULT modex-ok");
    e2s(c.finalize(), "finalize")
}

/// Two leaders on different nodes each name add-members; add-members call with no procs.
fn addmembers_on(c: &Client) -> R {
    let me = c.rank();
    let n = c.size();
    let leaders = vec![p(c, 0), p(c, n - 1)];
    let g = if me == 0 || me == n - 1 {
        let mut opts = ctx();
        opts.add_members = (1..n - 1)
            .filter(|r| (r % 2 == 0) == (me == 0))
            .map(|r| p(c, r))
            .collect();
        e2s(
            c.group_construct("adds", &leaders, opts),
            "leader construct",
        )?
    } else {
        e2s(
            c.group_construct("adds", &[], ctx()),
            "add-member construct",
        )?
    };
    check!(g.members == all(c), "members {}", ranks(&g.members));
    println!(
        "RESULT members={} ctx={}",
        ranks(&g.members),
        g.context_id.unwrap_or(0)
    );
    e2s(c.group_destruct("adds", None), "destruct")?;
    Ok(())
}

/// Scenario `body` as a job of its own: init, `body`, finalize.
fn alone(body: fn(&Client) -> R) -> R {
    let c = init()?;
    body(&c)?;
    e2s(c.finalize(), "finalize")
}

/// `construct`, `addmembers` and `fence` one after the other in one job (where a job's
/// start is what takes longest: under emulation, deploy/rxe's groups on verbs).
fn groups() -> R {
    let c = init()?;
    construct_on(&c)?;
    addmembers_on(&c)?;
    fence_on(&c)?;
    e2s(c.finalize(), "finalize")
}

/// PMIX_GROUP_OPTIONAL: the last rank ends before joining → partial success.
fn optional() -> R {
    let c = init()?;
    let n = c.size();
    if c.rank() == n - 1 {
        return e2s(c.finalize(), "finalize");
    }
    let opts = ConstructOpts {
        optional: true,
        ..ctx()
    };
    let g = e2s(c.group_construct("opt", &all(&c), opts), "construct")?;
    check!(
        g.status == ConstructStatus::PartialSuccess,
        "status {:?}",
        g.status
    );
    check!(
        g.failed == vec![p(&c, n - 1)],
        "failed {}",
        ranks(&g.failed)
    );
    check!(
        g.members == all(&c)[..n as usize - 1],
        "members {}",
        ranks(&g.members)
    );
    println!(
        "RESULT members={} ctx={}",
        ranks(&g.members),
        g.context_id.unwrap_or(0)
    );
    e2s(c.finalize(), "finalize")
}

/// Without optional participation, a listed rank ending before joining is an error.
fn required() -> R {
    let c = init()?;
    let n = c.size();
    if c.rank() == n - 1 {
        return e2s(c.finalize(), "finalize");
    }
    match c.group_construct("req", &all(&c), ctx()) {
        Err(CohortError::ProcTerminated { procs, .. }) => {
            check!(procs == vec![p(&c, n - 1)], "terminated {}", ranks(&procs))
        }
        other => return Err(format!("expected ProcTerminated, got {other:?}")),
    }
    println!("RESULT required-ok");
    e2s(c.finalize(), "finalize")
}

/// PMIX_GROUP_FT_COLLECTIVE on fences over the job (on one node they meet in shared
/// memory until a rank terminated): the last rank finalizes and exits; the others'
/// fault-tolerant fence completes without it, a strict one fails naming it, and a
/// fence where only some callers asked for tolerance fails for every caller (whichever
/// called first), never hangs. Then a fault-tolerant fence completes again.
fn ft_fence() -> R {
    let c = init()?;
    let (me, n) = (c.rank(), c.size());
    if me == n - 1 {
        return e2s(c.finalize(), "finalize");
    }
    let opts = |ft: bool| FenceOpts {
        ft_collective: ft,
        timeout_ms: Some(60_000),
        ..FenceOpts::default()
    };
    let gone = vec![p(&c, n - 1)];
    e2s(c.fence(&[], opts(true)), "fault-tolerant fence")?;
    let terminated = |what: &str, r: cohort::Result<()>| match r {
        Err(CohortError::ProcTerminated { procs, .. }) if procs == gone => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    };
    terminated("strict fence", c.fence(&[], opts(false)))?;
    // Rank 0 alone asks for tolerance: first it calls first, then last.
    for round in 0..2 {
        let late = (me == 0) == (round == 1);
        if late {
            std::thread::sleep(Duration::from_millis(300));
        }
        let r = c.fence(&[], opts(me == 0));
        terminated(&format!("mixed fence, round {round}"), r)?;
    }
    e2s(c.fence(&[], opts(true)), "fault-tolerant fence after")?;
    println!("RESULT ft-fence ok");
    e2s(c.finalize(), "finalize")
}

/// A fence over the job that timed out does not desynchronize the next one: rank 1
/// comes 1.5 s late to the first fence, where rank 0 gives up after 0.3 s; both get a
/// timeout naming rank 1 (the fence failed); rank 0's next fence still waits for rank
/// 1's next one (rank 1 leaves a marker file just before it). On one node these
/// fences start in shared memory, where rank 0's second arrival once counted toward
/// the first fence.
fn fence_after_timeout() -> R {
    let c = init()?;
    let me = c.rank();
    check!(c.size() == 2, "run with 2 ranks");
    let marker = std::env::temp_dir().join(format!("cohort-fence-marker-{}", c.nspace()));
    let opts = |ms: u64| FenceOpts {
        timeout_ms: Some(ms),
        ..FenceOpts::default()
    };
    let timed_out = |r: cohort::Result<()>| match r {
        Err(CohortError::Timeout { missing, .. }) if missing == [p(&c, 1)] => Ok(()),
        other => Err(format!("rank {me}'s first fence: {other:?}")),
    };
    if me == 1 {
        std::thread::sleep(Duration::from_millis(1500));
        timed_out(c.fence(&[], opts(60_000)))?;
        std::fs::write(&marker, b"1").map_err(|e| format!("marker: {e}"))?;
        e2s(c.fence(&[], opts(60_000)), "second fence")?;
    } else {
        timed_out(c.fence(&[], opts(300)))?;
        e2s(c.fence(&[], opts(60_000)), "second fence")?;
        check!(
            marker.exists(),
            "the second fence returned before rank 1 came to it"
        );
        let _ = std::fs::remove_file(&marker);
    }
    // And the fences after it still meet.
    e2s(c.fence(&[], opts(60_000)), "third fence")?;
    println!("RESULT fence-after-timeout ok");
    e2s(c.finalize(), "finalize")
}

/// PMIX_TIMEOUT: the last rank never calls; everyone else gets a timeout naming it.
fn timeout() -> R {
    let c = init()?;
    let n = c.size();
    if c.rank() == n - 1 {
        std::thread::sleep(Duration::from_secs(3));
        return e2s(c.finalize(), "finalize");
    }
    let opts = ConstructOpts {
        timeout_ms: Some(500),
        ..ctx()
    };
    match c.group_construct("slow", &all(&c), opts) {
        Err(CohortError::Timeout {
            missing,
            timeout_ms,
            ..
        }) => {
            check!(timeout_ms == 500, "timeout_ms {timeout_ms}");
            check!(missing == vec![p(&c, n - 1)], "missing {}", ranks(&missing));
        }
        other => return Err(format!("expected Timeout, got {other:?}")),
    }
    println!("RESULT timeout-ok");
    e2s(c.finalize(), "finalize")
}

/// Two constructs with overlapping members and a fence over the same procs, at once.
fn concurrent() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let half = n / 2;
    let x: Vec<ProcId> = (0..=half).map(|r| p(&c, r)).collect();
    let y: Vec<ProcId> = (half - 1..n).map(|r| p(&c, r)).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (gx, gy, f) = rt.block_on(async {
        let fx = x
            .contains(c.proc_id())
            .then(|| c.group_construct_async("cx", &x, ctx()));
        let fy = y
            .contains(c.proc_id())
            .then(|| c.group_construct_async("cy", &y, ctx()));
        let ff = c.fence_async(&[], FenceOpts::default());
        let gx = match fx {
            Some(f) => Some(f.await),
            None => None,
        };
        let gy = match fy {
            Some(f) => Some(f.await),
            None => None,
        };
        (gx, gy, ff.await)
    });
    e2s(f, "fence")?;
    let mut line = format!("RESULT rank={me}");
    if let Some(g) = gx {
        let g = e2s(g, "construct cx")?;
        check!(g.members == x, "cx members {}", ranks(&g.members));
        line += &format!(" cx={}", g.context_id.unwrap_or(0));
    }
    if let Some(g) = gy {
        let g = e2s(g, "construct cy")?;
        check!(g.members == y, "cy members {}", ranks(&g.members));
        line += &format!(" cy={}", g.context_id.unwrap_or(0));
    }
    println!("{line}");
    e2s(c.finalize(), "finalize")
}

/// Group ids are reusable once destruct completes; context ids are never reused.
fn reuse() -> R {
    let c = init()?;
    let mut seen = Vec::new();
    for _ in 0..5 {
        let g = e2s(c.group_construct("again", &all(&c), ctx()), "construct")?;
        let id = g.context_id.ok_or("no context id")?;
        check!(!seen.contains(&id), "context id {id} reused");
        seen.push(id);
        e2s(c.group_destruct("again", None), "destruct")?;
    }
    println!("RESULT ctx={seen:?}");
    e2s(c.finalize(), "finalize")
}

/// rfc0033: leave → every remaining member gets PMIX_GROUP_LEFT naming the leaver;
/// destruct then completes among the rest.
fn leave() -> R {
    let c = init()?;
    let me = c.rank();
    let rx = event_channel(&c, &[codes::GROUP_LEFT]);
    let updates = event_channel(&c, &[codes::GROUP_MEMBERSHIP_UPDATE]);
    e2s(c.group_construct("lv", &all(&c), ctx()), "construct")?;
    if me == 1 {
        e2s(c.group_leave("lv"), "leave")?;
        match c.group_destruct("lv", None) {
            Err(CohortError::NotAMember { .. }) | Err(CohortError::GroupNotFound { .. }) => {}
            other => return Err(format!("destruct after leave: {other:?}")),
        }
    } else {
        let ev = rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| "no GROUP_LEFT event")?;
        check!(
            ev.affected == vec![p(&c, 1)],
            "left event names {:?}",
            ev.affected
        );
        let g = e2s(c.group_query("lv"), "query")?;
        check!(!g.members.contains(&p(&c, 1)), "leaver still listed");
        // rfc0033 / pmix-standard PMIX_GROUP_MEMBERSHIP_UPDATE: the revised membership.
        let ev = next_event(&updates, "GROUP_MEMBERSHIP_UPDATE")?;
        let revised: Vec<ProcId> = all(&c).into_iter().filter(|q| q.rank != 1).collect();
        check!(
            cohort::info_get(&ev.info, cohort::keys::GROUP_MEMBERSHIP)
                == Some(&Value::Procs(revised.clone()))
                && cohort::info_get(&ev.info, cohort::keys::GROUP_ID)
                    == Some(&Value::Str("lv".into()))
                && g.members == revised,
            "membership update {ev:?}, query {}",
            ranks(&g.members)
        );
        e2s(
            c.group_destruct("lv", Some(Duration::from_secs(60))),
            "destruct",
        )?;
    }
    println!("RESULT leave-ok");
    e2s(c.finalize(), "finalize")
}

/// Events by range, across nodes; one raised before its handler exists is cached.
fn events() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let late = me == n - 1;
    let rx = (!late).then(|| event_channel(&c, &[1000, 1001, 1002]));
    e2s(c.group_construct("ev", &all(&c), ctx()), "construct")?;
    if me == 0 {
        e2s(
            c.notify(1000, Range::Session, vec![("k".into(), Value::U32(1))]),
            "notify session",
        )?;
        e2s(
            c.notify(1001, Range::Group("ev".into()), vec![]),
            "notify group",
        )?;
        e2s(
            c.notify(1002, Range::Procs(vec![p(&c, n - 1), p(&c, 1)]), vec![]),
            "notify procs",
        )?;
    }
    let expect: Vec<i32> = match me {
        0 => vec![],
        1 => vec![1000, 1001, 1002],
        r if r == n - 1 => vec![1000, 1001, 1002],
        _ => vec![1000, 1001],
    };
    let rx = match rx {
        Some(rx) => rx,
        None => {
            std::thread::sleep(Duration::from_millis(500));
            event_channel(&c, &[1000, 1001, 1002])
        }
    };
    let mut got = Vec::new();
    while got.len() < expect.len() {
        let ev = rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| format!("events so far {got:?}, expected {expect:?}"))?;
        check!(ev.source == p(&c, 0), "source {}", ev.source);
        got.push(ev.code);
    }
    got.sort();
    check!(got == expect, "events {got:?} expected {expect:?}");
    e2s(c.fence(&[], FenceOpts::default()), "fence")?;
    check!(rx.try_recv().is_err(), "unexpected extra event");
    // Local range: only this node's ranks
    if c.job().local_rank(me) == Some(0) {
        e2s(c.notify(1003, Range::Local, vec![]), "notify local")?;
    }
    e2s(c.fence(&[], FenceOpts::default()), "fence")?;
    println!("RESULT events={got:?}");
    e2s(c.group_destruct("ev", None), "destruct")?;
    e2s(c.finalize(), "finalize")
}

/// Bad input gets typed errors naming the group/proc; the server keeps serving.
fn badinput() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    match c.group_construct("", &all(&c), ctx()) {
        Err(CohortError::InvalidGroupId { .. }) => {}
        other => return Err(format!("empty id: {other:?}")),
    }
    match c.group_construct(&"x".repeat(256), &all(&c), ctx()) {
        Err(CohortError::InvalidGroupId { reason, .. }) => {
            check!(reason.contains("256"), "{reason}")
        }
        other => return Err(format!("long id: {other:?}")),
    }
    match c.group_construct("u", &[p(&c, me), p(&c, 999)], ctx()) {
        Err(CohortError::UnknownProc { proc, .. }) => check!(proc.rank == 999, "names {proc}"),
        other => return Err(format!("unknown proc: {other:?}")),
    }
    match c.group_destruct("nobody-has-this", None) {
        Err(CohortError::GroupNotFound { id }) => check!(id == "nobody-has-this", "{id}"),
        other => return Err(format!("destruct unknown: {other:?}")),
    }
    match c.group_leave("nobody-has-this") {
        Err(CohortError::GroupNotFound { .. }) => {}
        other => return Err(format!("leave unknown: {other:?}")),
    }
    match c.get(&p(&c, 12345), "k", None) {
        Err(CohortError::UnknownProc { proc, .. }) => check!(proc.rank == 12345, "{proc}"),
        other => return Err(format!("get unknown proc: {other:?}")),
    }
    // live id: ranks 0,1 build it; the others then try it with another membership
    if me < 2 {
        e2s(
            c.group_construct("live", &[p(&c, 0), p(&c, 1)], ctx()),
            "construct live",
        )?;
    }
    e2s(c.fence(&[], FenceOpts::default()), "fence")?;
    if me >= 2 {
        let others: Vec<ProcId> = (2..n).map(|r| p(&c, r)).collect();
        match c.group_construct("live", &others, ctx()) {
            Err(CohortError::GroupIdInUse { id, members }) => {
                check!(
                    id == "live" && members == vec![p(&c, 0), p(&c, 1)],
                    "{id} {members:?}"
                )
            }
            other => return Err(format!("live id: {other:?}")),
        }
        // not a member of "live"
        match c.group_leave("live") {
            Err(CohortError::NotAMember { .. }) | Err(CohortError::GroupNotFound { .. }) => {}
            other => return Err(format!("leave non-member: {other:?}")),
        }
    }
    e2s(c.fence(&[], FenceOpts::default()), "fence")?;
    if me < 2 {
        e2s(c.group_destruct("live", None), "destruct live")?;
    }
    println!("RESULT badinput-ok");
    e2s(c.finalize(), "finalize")
}

/// The last rank dies before calling the fence: everyone else gets an error naming it
/// instead of hanging. (Run with --enable-recovery.)
fn dies_before_fence() -> R {
    let c = init()?;
    let n = c.size();
    if c.rank() == n - 1 {
        std::process::abort();
    }
    match c.fence(
        &[],
        FenceOpts {
            collect: false,
            timeout_ms: Some(60_000),
            ft_collective: false,
        },
    ) {
        Err(CohortError::ProcTerminated { procs, .. }) => {
            check!(procs == vec![p(&c, n - 1)], "names {}", ranks(&procs))
        }
        other => return Err(format!("expected ProcTerminated, got {other:?}")),
    }
    // the server keeps serving the survivors
    let survivors: Vec<ProcId> = (0..n - 1).map(|r| p(&c, r)).collect();
    e2s(c.fence(&survivors, FenceOpts::default()), "survivor fence")?;
    println!("RESULT survived");
    e2s(c.finalize(), "finalize")
}

/// The last rank joins a construct and disconnects before it completes: it is still a
/// member (it joined), and with notify-termination the others get a member-failed event.
fn dies_in_construct() -> R {
    let c = init()?;
    let n = c.size();
    let opts = ConstructOpts {
        notify_termination: true,
        ..ctx()
    };
    if c.rank() == n - 1 {
        let _pending = c.group_construct_async("dying", &all(&c), opts);
        std::thread::sleep(Duration::from_millis(100));
        std::process::abort();
    }
    let rx = event_channel(&c, &[codes::GROUP_MEMBER_FAILED]);
    std::thread::sleep(Duration::from_millis(500));
    let g = e2s(c.group_construct("dying", &all(&c), opts), "construct")?;
    check!(g.members == all(&c), "members {}", ranks(&g.members));
    let ev = rx
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| "no member-failed event")?;
    check!(
        ev.affected == vec![p(&c, n - 1)],
        "failed {:?}",
        ev.affected
    );
    e2s(
        c.group_destruct("dying", Some(Duration::from_secs(60))),
        "destruct",
    )?;
    println!("RESULT survived");
    e2s(c.finalize(), "finalize")
}

fn raw_connect() -> Result<UnixStream, String> {
    let path = std::env::var("COHORT_SERVER_URI").map_err(|_| "no COHORT_SERVER_URI")?;
    let s = UnixStream::connect(&path).map_err(|e| format!("connect {path}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// Reads until the server closes the connection (a refused client is closed).
fn expect_closed(mut s: UnixStream, what: &str) -> R {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(format!("{what}: connection not closed by the server: {e}")),
        }
    }
}

/// Malformed and oversized frames, and a wrong token, each cost one connection only.
fn badframe() -> R {
    // garbage instead of a hello
    let mut s = raw_connect()?;
    s.write_all(&[9, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5])
        .map_err(|e| e.to_string())?;
    expect_closed(s, "malformed hello")?;
    // oversized length prefix
    let mut s = raw_connect()?;
    s.write_all(&u32::MAX.to_le_bytes())
        .map_err(|e| e.to_string())?;
    expect_closed(s, "oversized frame")?;
    // a well-formed hello with the wrong token
    let rank: u32 = std::env::var("COHORT_RANK")
        .map_err(|e| e.to_string())?
        .parse()
        .map_err(|_| "rank")?;
    let nspace = std::env::var("COHORT_NSPACE").map_err(|e| e.to_string())?;
    let path = std::env::var("COHORT_SERVER_URI").map_err(|e| e.to_string())?;
    match Client::connect(&path, &nspace, rank, b"not-the-token") {
        Err(CohortError::AuthRefused(why)) => check!(why.contains("token"), "{why}"),
        other => return Err(format!("wrong token: {other:?}")),
    }
    // the server still serves this rank and everyone else
    let c = init()?;
    e2s(c.fence(&[], FenceOpts::default()), "fence after bad frames")?;
    println!("RESULT badframe-ok");
    e2s(c.finalize(), "finalize")
}

/// The client socket lives in a private 0700 directory; another uid cannot connect.
fn private_socket() -> R {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let path = std::env::var("COHORT_SERVER_URI").map_err(|_| "no COHORT_SERVER_URI")?;
    let dir = std::path::Path::new(&path)
        .parent()
        .ok_or("socket has no parent dir")?;
    let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
    check!(
        meta.permissions().mode() & 0o777 == 0o700,
        "socket dir mode {:o}",
        meta.permissions().mode()
    );
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    check!(meta.uid() == uid, "socket dir owner {}", meta.uid());
    if uid == 0 {
        // Another user (nobody) must not be able to reach the socket.
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let status = std::process::Command::new(exe)
            .arg("connect-only")
            .uid(65534)
            .gid(65534)
            .status()
            .map_err(|e| format!("spawn as nobody: {e}"))?;
        check!(
            status.code() == Some(0),
            "a connection from uid 65534 was not refused: {status}"
        );
    }
    let c = init()?;
    e2s(c.fence(&[], FenceOpts::default()), "fence")?;
    println!("RESULT private-ok");
    e2s(c.finalize(), "finalize")
}

/// Exit 0 when connecting to the server socket is refused, 1 when it succeeds.
fn connect_only() -> R {
    let path = std::env::var("COHORT_SERVER_URI").map_err(|_| "no COHORT_SERVER_URI")?;
    match UnixStream::connect(&path) {
        Ok(_) => Err(format!("uid {} connected to {path}", unsafe {
            libc::getuid()
        })),
        Err(_) => Ok(()),
    }
}

// ---------------------------------------------------------------------------------
// Bootstrap (§6.4.3.2) and invite/join (§6.4.3.3) methods, and their failure paths.
// Every wait is bounded: constructs by METHOD_TIMEOUT_MS, events by EVENT_WAIT, so a
// rank reports what it was waiting for well before the harness deadline.

use std::future::Future;
use std::pin::Pin;

use cohort::{ConstructDecision, GroupEventInfo, GroupResult, InviteOpts};

const METHOD_TIMEOUT_MS: u64 = 30_000;

type JoinFuture = Pin<Box<dyn Future<Output = Result<Option<GroupResult>, CohortError>> + Send>>;

fn mctx() -> ConstructOpts {
    ConstructOpts {
        assign_context_id: true,
        timeout_ms: Some(METHOD_TIMEOUT_MS),
        ..Default::default()
    }
}

fn invite_opts() -> InviteOpts {
    InviteOpts {
        assign_context_id: true,
        timeout_ms: Some(METHOD_TIMEOUT_MS),
        ..Default::default()
    }
}

fn join_timeout() -> Option<Duration> {
    Some(Duration::from_millis(METHOD_TIMEOUT_MS))
}

/// Drives `fut` (a reply future of an `*_async` call) to completion on this thread.
fn await_reply<T>(fut: impl Future<Output = T>, what: &str) -> Result<T, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| e.to_string())?;
    // The timer must be created inside the runtime.
    rt.block_on(async { tokio::time::timeout(EVENT_WAIT * 2, fut).await })
        .map_err(|_| format!("{what}: no reply within {:?}", EVENT_WAIT * 2))
}

/// Fails with the first error a handler reported, if any.
fn handler_errors(errs: &crossbeam_channel::Receiver<String>) -> R {
    match errs.try_recv() {
        Ok(e) => Err(format!("in an event handler: {e}")),
        Err(_) => Ok(()),
    }
}

/// Checks the group fields of an event: its group id and, when given, its source,
/// leader and membership.
fn check_group_event(
    ev: &Event,
    what: &str,
    id: &str,
    source: Option<&ProcId>,
    leader: Option<&ProcId>,
    membership: Option<&[ProcId]>,
) -> Result<GroupEventInfo, String> {
    let info = GroupEventInfo::of(ev);
    check!(
        info.id.as_deref() == Some(id),
        "{what}: group id {:?}, expected {id:?}",
        info.id
    );
    if let Some(src) = source {
        check!(
            &ev.source == src,
            "{what}: source {}, expected {src}",
            ev.source
        );
    }
    if let Some(l) = leader {
        check!(
            info.leader.as_ref() == Some(l),
            "{what}: leader {:?}, expected {l}",
            info.leader
        );
    }
    if let Some(m) = membership {
        check!(
            info.membership.as_deref() == Some(m),
            "{what}: membership {:?}, expected {}",
            info.membership.as_deref().map(ranks),
            ranks(m)
        );
    }
    Ok(info)
}

/// Checks a completed group: status, canonical membership, a context id, and the
/// `GROUP_CONSTRUCT_COMPLETE` event every member gets (same membership and id).
fn check_complete(
    g: &GroupResult,
    complete: &crossbeam_channel::Receiver<Event>,
    id: &str,
    members: &[ProcId],
) -> R {
    check!(g.id == id, "result for group {:?}", g.id);
    check!(
        g.members == members,
        "members {}, expected {}",
        ranks(&g.members),
        ranks(members)
    );
    check!(g.context_id.is_some(), "no context id");
    let ev = next_event(complete, "GROUP_CONSTRUCT_COMPLETE")?;
    let info = check_group_event(&ev, "construct-complete", id, None, None, Some(members))?;
    check!(
        info.context_id == g.context_id,
        "complete event context id {:?}, result {:?}",
        info.context_id,
        g.context_id
    );
    Ok(())
}

/// The group is usable once complete: query it and fence over `{id,*}`.
fn use_group(c: &Client, g: &GroupResult) -> R {
    let q = e2s(c.group_query(&g.id), "group query")?;
    check!(
        q.members == g.members && q.context_id == g.context_id,
        "query says members {} ctx {:?}",
        ranks(&q.members),
        q.context_id
    );
    e2s(
        c.fence(
            &[ProcId::wildcard(g.id.as_str())],
            FenceOpts {
                collect: false,
                timeout_ms: Some(METHOD_TIMEOUT_MS),
                ft_collective: false,
            },
        ),
        "group fence",
    )
}

fn result_line(g: &GroupResult) -> String {
    format!(
        "RESULT members={} ctx={} status={:?} failed={}",
        ranks(&g.members),
        g.context_id.unwrap_or(0),
        g.status,
        ranks(&g.failed)
    )
}

fn fence_all(c: &Client) -> R {
    e2s(
        c.fence(
            &[],
            FenceOpts {
                collect: false,
                timeout_ms: Some(METHOD_TIMEOUT_MS),
                ft_collective: false,
            },
        ),
        "fence",
    )
}

fn destruct(c: &Client, id: &str) -> R {
    e2s(
        c.group_destruct(id, Some(Duration::from_millis(METHOD_TIMEOUT_MS))),
        "destruct",
    )
}

/// Bootstrap leaders `0` and `n-1` (different nodes on 3 node servers) name the add-members
/// between them, half each; leader `me` names these.
fn bootstrap_adds(c: &Client, me: u32) -> Vec<ProcId> {
    let n = c.size();
    (1..n - 1)
        .filter(|r| (r % 2 == 0) == (me == 0))
        .map(|r| p(c, r))
        .collect()
}

/// §6.4.3.2: two leaders each know only themselves and the leader count; each names
/// half of the add-members. Everyone gets the full canonical membership, one context id,
/// every member's group info, and every member's remote data without a fence.
fn bootstrap() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    e2s(c.put(Scope::Remote, "ep", format!("ep-{me}")), "put")?;
    let mut opts = mctx();
    opts.group_info = vec![("color".into(), Value::U32(me * 7))];
    let g = if me == 0 || me == n - 1 {
        opts.bootstrap = Some(2);
        opts.add_members = bootstrap_adds(&c, me);
        e2s(
            c.group_construct("boot", &[p(&c, me)], opts),
            "bootstrap leader construct",
        )?
    } else {
        e2s(
            c.group_construct("boot", &[], opts),
            "bootstrap add-member construct",
        )?
    };
    check!(
        g.status == ConstructStatus::Success,
        "status {:?}",
        g.status
    );
    check!(g.members == all(&c), "members {}", ranks(&g.members));
    check!(g.context_id.is_some(), "no context id");
    check!(
        g.group_info.len() == n as usize,
        "group info of {} members",
        g.group_info.len()
    );
    for (pr, info) in &g.group_info {
        check!(
            info == &vec![("color".to_string(), Value::U32(pr.rank * 7))],
            "group info of {pr}: {info:?}"
        );
    }
    let other = p(&c, (me + 1) % n);
    let ep = e2s(c.get(&other, "ep", Some(Duration::from_secs(5))), "get ep")?;
    check!(
        ep == Value::Str(format!("ep-{}", other.rank)),
        "endpoint of {other}: {ep:?}"
    );
    use_group(&c, &g)?;
    println!("{}", result_line(&g));
    destruct(&c, "boot")?;
    e2s(c.finalize(), "finalize")
}

/// Bootstrap leaders that disagree on the leader count (2 vs 3) fail, with every other
/// caller, with an error naming both claims, well before the timeout. Leader 0 names
/// two add-members: rank 1 calls before the leaders (they wait for its go-ahead), rank 2
/// only after leader 0 got its error (a late caller gets the same error).
fn bootstrap_count_mismatch() -> R {
    const EARLY_CALLED: i32 = 7101;
    const LEADER_FAILED_ALREADY: i32 = 7102;
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "boot-mm";
    let (early, late) = (1, 2);
    let go = event_channel(&c, &[EARLY_CALLED, LEADER_FAILED_ALREADY]);
    let opts = ConstructOpts {
        timeout_ms: Some(10_000),
        ..Default::default()
    };
    let expect_mismatch = |got: Result<GroupResult, CohortError>| -> R {
        match got {
            Err(CohortError::LeaderCountMismatch { id: got_id, a, b }) => {
                check!(got_id == id, "error names group {got_id:?}");
                let mut claims = vec![a, b];
                claims.sort_by_key(|(pr, _)| pr.rank);
                check!(
                    claims == vec![(p(&c, 0), 2), (p(&c, n - 1), 3)],
                    "error names the claims {claims:?}"
                );
                Ok(())
            }
            other => Err(format!("expected LeaderCountMismatch, got {other:?}")),
        }
    };
    let start = std::time::Instant::now();
    let got = match me {
        r if r == early => {
            let pending = c.group_construct_async(id, &[], opts);
            let leaders = vec![p(&c, 0), p(&c, n - 1)];
            e2s(
                c.notify(EARLY_CALLED, Range::Procs(leaders), vec![]),
                "notify the leaders",
            )?;
            Some(await_reply(pending, "add-member construct")?)
        }
        r if r == late => {
            let ev = next_event(&go, "leader 0's report")?;
            check!(
                ev.code == LEADER_FAILED_ALREADY,
                "unexpected event {}",
                ev.code
            );
            Some(c.group_construct(id, &[], opts))
        }
        r if r == 0 || r == n - 1 => {
            let ev = next_event(&go, "the early add-member's go-ahead")?;
            check!(ev.code == EARLY_CALLED, "unexpected event {}", ev.code);
            let opts = ConstructOpts {
                bootstrap: Some(if me == 0 { 2 } else { 3 }),
                add_members: if me == 0 {
                    vec![p(&c, early), p(&c, late)]
                } else {
                    vec![]
                },
                ..opts
            };
            let got = c.group_construct(id, &[p(&c, me)], opts);
            if me == 0 {
                e2s(
                    c.notify(
                        LEADER_FAILED_ALREADY,
                        Range::Procs(vec![p(&c, late)]),
                        vec![],
                    ),
                    "notify the late add-member",
                )?;
            }
            Some(got)
        }
        _ => None,
    };
    if let Some(got) = got {
        check!(
            start.elapsed() < Duration::from_secs(5),
            "the mismatch took {:?} to be reported: {got:?}",
            start.elapsed()
        );
        expect_mismatch(got)?;
        println!("RESULT count-mismatch-ok");
    }
    fence_all(&c)?;
    e2s(c.finalize(), "finalize")
}

/// A named add-member (rank n-2, named by leader 0) ends before calling; with optional
/// participation the others get PARTIAL_SUCCESS without it, and no events.
fn bootstrap_member_dies() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let dying = n - 2;
    if me == dying {
        return e2s(c.finalize(), "finalize");
    }
    let failed_events = event_channel(&c, &[codes::GROUP_MEMBER_FAILED]);
    let mut opts = ConstructOpts {
        optional: true,
        ..mctx()
    };
    let g = if me == 0 || me == n - 1 {
        opts.bootstrap = Some(2);
        opts.add_members = bootstrap_adds(&c, me);
        if me == 0 {
            check!(
                opts.add_members.contains(&p(&c, dying)),
                "leader 0 must name rank {dying}"
            );
        }
        e2s(
            c.group_construct("boot-opt", &[p(&c, me)], opts),
            "bootstrap leader construct",
        )?
    } else {
        e2s(
            c.group_construct("boot-opt", &[], opts),
            "bootstrap add-member construct",
        )?
    };
    let expect: Vec<ProcId> = all(&c).into_iter().filter(|q| q.rank != dying).collect();
    check!(
        g.status == ConstructStatus::PartialSuccess,
        "status {:?}",
        g.status
    );
    check!(
        g.failed == vec![p(&c, dying)],
        "failed {}",
        ranks(&g.failed)
    );
    check!(g.members == expect, "members {}", ranks(&g.members));
    let survivors: Vec<ProcId> = expect.clone();
    e2s(c.fence(&survivors, FenceOpts::default()), "survivor fence")?;
    check!(
        failed_events.try_recv().is_err(),
        "optional participation raised GROUP_MEMBER_FAILED"
    );
    println!("{}", result_line(&g));
    destruct(&c, "boot-opt")?;
    e2s(c.finalize(), "finalize")
}

/// A decliner is not a member: the group is not among its group names. (Not checked
/// with `group_query`: the node server answers queries for any group it knows.)
fn check_not_member(c: &Client, id: &str) -> R {
    let names = e2s(c.group_names(), "group names")?;
    check!(
        !names.iter().any(|n| n == id),
        "the decliner belongs to {id:?}: group names {names:?}"
    );
    Ok(())
}

/// Checks an invitation from `leader` to group `id`; `invited` = everyone invited.
fn check_invitation(ev: &Event, id: &str, leader: &ProcId, invited: Option<&[ProcId]>) -> R {
    check!(
        ev.code == codes::GROUP_INVITED,
        "event {} is not GROUP_INVITED",
        ev.code
    );
    check_group_event(ev, "invitation", id, Some(leader), Some(leader), invited).map(|_| ())
}

/// An INVITED handler that accepts from inside the handler with the non-blocking join.
/// With `keep`, the join's future goes to the main thread; otherwise it is dropped on
/// the spot (the join must stand regardless). Problems go to `errs`.
fn accept_in_handler(
    id: &'static str,
    leader: ProcId,
    invited: Option<Vec<ProcId>>,
    keep: Option<crossbeam_channel::Sender<JoinFuture>>,
    errs: crossbeam_channel::Sender<String>,
) -> impl Fn(&Client, &Event) + Send + Sync + 'static {
    move |c, ev| {
        if let Err(e) = check_invitation(ev, id, &leader, invited.as_deref()) {
            let _ = errs.send(e);
            return;
        }
        let info = vec![("color".to_string(), Value::U32(c.rank() * 7))];
        let fut = c.group_join_async(id, &leader, true, join_timeout(), info);
        match &keep {
            Some(tx) => {
                let _ = tx.send(Box::pin(fut));
            }
            None => drop(fut),
        }
    }
}

/// The invite leader's side: invite and check the result and the completion event.
/// Invitees that terminated before answering (`failed`) are reported like optional
/// participants of the other methods (partial success); declines are not failures.
fn lead_invite(
    c: &Client,
    id: &str,
    invitees: &[ProcId],
    opts: InviteOpts,
    complete: &crossbeam_channel::Receiver<Event>,
    members: &[ProcId],
    failed: &[ProcId],
) -> Result<GroupResult, String> {
    let g = e2s(c.group_invite(id, invitees, opts), "invite")?;
    let status = if failed.is_empty() {
        ConstructStatus::Success
    } else {
        ConstructStatus::PartialSuccess
    };
    check!(
        g.status == status && g.failed == failed,
        "status {:?} failed {}",
        g.status,
        ranks(&g.failed)
    );
    check_complete(&g, complete, id, members)?;
    Ok(g)
}

/// §6.4.3.3: rank 0 invites everyone else; invitees accept from their INVITED handler
/// with the non-blocking join (odd ranks keep the future, even ranks drop it); the
/// last rank registers its handler only after the invitation was sent (cached event).
/// Everyone gets CONSTRUCT_COMPLETE with one membership and context id; the leader's
/// invite returns the same result and it saw one ACCEPTED event per invitee.
fn invite() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "inv";
    let leader = p(&c, 0);
    let invitees: Vec<ProcId> = (1..n).map(|r| p(&c, r)).collect();
    let complete = event_channel(&c, &[codes::GROUP_CONSTRUCT_COMPLETE]);
    let accepted = event_channel(&c, &[codes::GROUP_INVITE_ACCEPTED]);
    let (errs_tx, errs) = crossbeam_channel::unbounded();
    let (fut_tx, futs) = crossbeam_channel::unbounded();
    let keep = (me % 2 == 1).then_some(fut_tx);
    let late = me == n - 1;
    let handler = accept_in_handler(id, leader.clone(), Some(invitees.clone()), keep, errs_tx);
    let mut handler = Some(handler);
    if me != 0 && !late {
        if let Some(h) = handler.take() {
            c.register_event_handler(Some(&[codes::GROUP_INVITED]), h);
        }
    }
    fence_all(&c)?;
    let g = if me == 0 {
        let g = lead_invite(&c, id, &invitees, invite_opts(), &complete, &all(&c), &[])?;
        let mut from = Vec::new();
        for _ in 1..n {
            let ev = next_event(&accepted, "GROUP_INVITE_ACCEPTED")?;
            check_group_event(&ev, "accepted", id, None, None, None)?;
            check!(
                ev.affected == vec![ev.source.clone()],
                "accepted event: source {} affected {:?}",
                ev.source,
                ev.affected
            );
            from.push(ev.source);
        }
        from.sort();
        check!(from == invitees, "accepted by {}", ranks(&from));
        g
    } else {
        if late {
            std::thread::sleep(Duration::from_millis(500));
            if let Some(h) = handler.take() {
                c.register_event_handler(Some(&[codes::GROUP_INVITED]), h);
            }
        }
        let ev = match complete.recv_timeout(EVENT_WAIT) {
            Ok(ev) => ev,
            Err(_) => {
                handler_errors(&errs)?;
                return Err("no GROUP_CONSTRUCT_COMPLETE event".into());
            }
        };
        handler_errors(&errs)?;
        let info = check_group_event(&ev, "construct-complete", id, None, None, Some(&all(&c)))?;
        let g = e2s(c.group_query(id), "query after CONSTRUCT_COMPLETE")?;
        check!(
            info.context_id.is_some() && info.context_id == g.context_id,
            "complete event ctx {:?}, query ctx {:?}",
            info.context_id,
            g.context_id
        );
        if me % 2 == 1 {
            let fut = futs
                .recv_timeout(EVENT_WAIT)
                .map_err(|_| "the handler handed over no join future")?;
            let joined = e2s(await_reply(fut, "join")?, "join")?
                .ok_or("an accepting join returned no group")?;
            check!(
                joined.members == g.members && joined.context_id == g.context_id,
                "join returned members {} ctx {:?}",
                ranks(&joined.members),
                joined.context_id
            );
        }
        check!(
            accepted.try_recv().is_err(),
            "an invitee got GROUP_INVITE_ACCEPTED"
        );
        g
    };
    use_group(&c, &g)?;
    println!("{}", result_line(&g));
    destruct(&c, id)?;
    e2s(c.finalize(), "finalize")
}

/// Invitees hand the invitation from the handler to the application thread, which calls
/// the blocking join (no deadlock: the handler has returned).
fn invite_blocking_join() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "inv-blk";
    let leader = p(&c, 0);
    let invitees: Vec<ProcId> = (1..n).map(|r| p(&c, r)).collect();
    let complete = event_channel(&c, &[codes::GROUP_CONSTRUCT_COMPLETE]);
    let invited = event_channel(&c, &[codes::GROUP_INVITED]);
    fence_all(&c)?;
    let g = if me == 0 {
        lead_invite(&c, id, &invitees, invite_opts(), &complete, &all(&c), &[])?
    } else {
        let ev = next_event(&invited, "GROUP_INVITED")?;
        check_invitation(&ev, id, &leader, Some(&invitees))?;
        let g = e2s(
            c.group_join(id, &leader, true, join_timeout(), vec![]),
            "blocking join",
        )?
        .ok_or("an accepting join returned no group")?;
        check_complete(&g, &complete, id, &all(&c))?;
        g
    };
    use_group(&c, &g)?;
    println!("{}", result_line(&g));
    destruct(&c, id)?;
    e2s(c.finalize(), "finalize")
}

/// Rank 1 declines (blocking join, returns None at once); the leader gets a DECLINED
/// event naming it; the group completes without it.
fn invite_decline_drop() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "inv-dec";
    let leader = p(&c, 0);
    let decliner = p(&c, 1);
    let invitees: Vec<ProcId> = (1..n).map(|r| p(&c, r)).collect();
    let members: Vec<ProcId> = all(&c).into_iter().filter(|q| q != &decliner).collect();
    let complete = event_channel(&c, &[codes::GROUP_CONSTRUCT_COMPLETE]);
    let declined = event_channel(&c, &[codes::GROUP_INVITE_DECLINED]);
    let invited = event_channel(&c, &[codes::GROUP_INVITED]);
    let (errs_tx, errs) = crossbeam_channel::unbounded();
    if me > 1 {
        let h = accept_in_handler(id, leader.clone(), Some(invitees.clone()), None, errs_tx);
        c.register_event_handler(Some(&[codes::GROUP_INVITED]), h);
    }
    fence_all(&c)?;
    let g = match me {
        0 => {
            let g = lead_invite(&c, id, &invitees, invite_opts(), &complete, &members, &[])?;
            let ev = next_event(&declined, "GROUP_INVITE_DECLINED")?;
            check_group_event(&ev, "declined", id, Some(&decliner), None, None)?;
            check!(
                ev.affected == vec![decliner.clone()],
                "declined event affects {:?}",
                ev.affected
            );
            Some(g)
        }
        1 => {
            let ev = next_event(&invited, "GROUP_INVITED")?;
            check_invitation(&ev, id, &leader, Some(&invitees))?;
            let start = std::time::Instant::now();
            let got = e2s(
                c.group_join(id, &leader, false, join_timeout(), vec![]),
                "declining join",
            )?;
            check!(got.is_none(), "a declining join returned a group");
            check!(
                start.elapsed() < Duration::from_secs(5),
                "declining took {:?}",
                start.elapsed()
            );
            None
        }
        _ => {
            let ev = next_event(&complete, "GROUP_CONSTRUCT_COMPLETE");
            handler_errors(&errs)?;
            let ev = ev?;
            check_group_event(&ev, "construct-complete", id, None, None, Some(&members))?;
            Some(e2s(c.group_query(id), "query after CONSTRUCT_COMPLETE")?)
        }
    };
    if let Some(g) = &g {
        use_group(&c, g)?;
    }
    fence_all(&c)?;
    if let Some(g) = g {
        println!("{}", result_line(&g));
        destruct(&c, id)?;
    } else {
        check_not_member(&c, id)?;
        check!(
            complete.try_recv().is_err(),
            "the decliner got GROUP_CONSTRUCT_COMPLETE"
        );
    }
    e2s(c.finalize(), "finalize")
}

/// `decide_declines`: rank 1 declines (non-blocking join from its handler); the leader's
/// DECLINED handler invites rank n-1 (not invited at first) instead; the invite returns
/// once n-1 has answered; the group holds n-1 and not 1.
fn invite_decline_replace() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "inv-rep";
    let leader = p(&c, 0);
    let decliner = p(&c, 1);
    let replacement = p(&c, n - 1);
    let invitees: Vec<ProcId> = (1..n - 1).map(|r| p(&c, r)).collect();
    let members: Vec<ProcId> = all(&c).into_iter().filter(|q| q != &decliner).collect();
    let complete = event_channel(&c, &[codes::GROUP_CONSTRUCT_COMPLETE]);
    let (errs_tx, errs) = crossbeam_channel::unbounded::<String>();
    let (fut_tx, futs) = crossbeam_channel::unbounded();
    let (decided_tx, decided) = crossbeam_channel::unbounded();
    if me == 0 {
        let (id_, decliner_, replacement_) = (id, decliner.clone(), replacement.clone());
        c.register_event_handler(Some(&[codes::GROUP_INVITE_DECLINED]), move |c, ev| {
            let mut r =
                check_group_event(ev, "declined", id_, Some(&decliner_), None, None).map(|_| ());
            if r.is_ok() {
                r = c
                    .group_construct_decide(
                        id_,
                        ConstructDecision::Invite(vec![replacement_.clone()]),
                    )
                    .map_err(|e| format!("decide Invite: {e}"));
            }
            let _ = decided_tx.send(r);
        });
    } else if me == 1 {
        let (leader_, errs_) = (leader.clone(), errs_tx.clone());
        let invited = invitees.clone();
        c.register_event_handler(Some(&[codes::GROUP_INVITED]), move |c, ev| {
            if let Err(e) = check_invitation(ev, id, &leader_, Some(&invited)) {
                let _ = errs_.send(e);
                return;
            }
            let fut = c.group_join_async(id, &leader_, false, join_timeout(), vec![]);
            let _ = fut_tx.send(Box::pin(fut) as JoinFuture);
        });
    } else if me == n - 1 {
        // The replacement's invitation lists at least itself.
        let (leader_, errs_) = (leader.clone(), errs_tx.clone());
        let me_ = p(&c, me);
        let check_and_keep = accept_in_handler(id, leader.clone(), None, Some(fut_tx), errs_tx);
        c.register_event_handler(Some(&[codes::GROUP_INVITED]), move |c, ev| {
            let listed = GroupEventInfo::of(ev)
                .membership
                .is_some_and(|m| m.contains(&me_));
            if !listed {
                let _ = errs_.send(format!(
                    "replacement invitation from {leader_} does not list {me_}"
                ));
            }
            check_and_keep(c, ev);
        });
    } else {
        let h = accept_in_handler(id, leader.clone(), Some(invitees.clone()), None, errs_tx);
        c.register_event_handler(Some(&[codes::GROUP_INVITED]), h);
    }
    fence_all(&c)?;
    let opts = InviteOpts {
        decide_declines: true,
        ..invite_opts()
    };
    let g = if me == 0 {
        let g = lead_invite(&c, id, &invitees, opts, &complete, &members, &[])?;
        decided
            .recv_timeout(EVENT_WAIT)
            .map_err(|_| "the DECLINED handler never ran")??;
        Some(g)
    } else if me == 1 {
        let fut = futs
            .recv_timeout(EVENT_WAIT)
            .map_err(|_| "no invitation handled")?;
        handler_errors(&errs)?;
        let got = e2s(await_reply(fut, "declining join")?, "declining join")?;
        check!(got.is_none(), "a declining join returned a group");
        None
    } else {
        let ev = next_event(&complete, "GROUP_CONSTRUCT_COMPLETE");
        handler_errors(&errs)?;
        check_group_event(&ev?, "construct-complete", id, None, None, Some(&members))?;
        let g = e2s(c.group_query(id), "query after CONSTRUCT_COMPLETE")?;
        if me == n - 1 {
            let fut = futs
                .recv_timeout(EVENT_WAIT)
                .map_err(|_| "no join future")?;
            let joined = e2s(await_reply(fut, "join")?, "join")?
                .ok_or("the replacement's accepting join returned no group")?;
            check!(
                joined.members == members,
                "join members {}",
                ranks(&joined.members)
            );
        }
        Some(g)
    };
    if let Some(g) = &g {
        use_group(&c, g)?;
    }
    fence_all(&c)?;
    match g {
        Some(g) => {
            println!("{}", result_line(&g));
            destruct(&c, id)?;
        }
        None => check_not_member(&c, id)?,
    }
    e2s(c.finalize(), "finalize")
}

/// The leader aborts after the first accept (rank 1's): rank 1's join and the leader's
/// invite fail with ConstructAborted; every invitee, answered or not, gets
/// GROUP_CONSTRUCT_ABORT; a late answer to the aborted invitation fails at once.
fn invite_abort() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "inv-abort";
    let leader = p(&c, 0);
    let invitees: Vec<ProcId> = (1..n).map(|r| p(&c, r)).collect();
    let aborted = event_channel(&c, &[codes::GROUP_CONSTRUCT_ABORT]);
    let invited = event_channel(&c, &[codes::GROUP_INVITED]);
    let (decided_tx, decided) = crossbeam_channel::unbounded();
    if me == 0 {
        c.register_event_handler(Some(&[codes::GROUP_INVITE_ACCEPTED]), move |c, ev| {
            let r = check_group_event(ev, "accepted", id, None, None, None)
                .map(|_| ev.source.clone())
                .and_then(|from| {
                    c.group_construct_decide(id, ConstructDecision::Abort)
                        .map(|()| from)
                        .map_err(|e| format!("decide Abort: {e}"))
                });
            let _ = decided_tx.send(r);
        });
    }
    fence_all(&c)?;
    let is_aborted =
        |r: &CohortError| matches!(r, CohortError::ConstructAborted { id: got, .. } if got == id);
    if me == 0 {
        match c.group_invite(id, &invitees, invite_opts()) {
            Err(e) if is_aborted(&e) => {}
            other => return Err(format!("invite: expected ConstructAborted, got {other:?}")),
        }
        let from = decided
            .recv_timeout(EVENT_WAIT)
            .map_err(|_| "the ACCEPTED handler never ran")??;
        check!(from == p(&c, 1), "first accept from {from}");
    } else {
        let ev = next_event(&invited, "GROUP_INVITED")?;
        check_invitation(&ev, id, &leader, Some(&invitees))?;
        if me == 1 {
            match c.group_join(id, &leader, true, join_timeout(), vec![]) {
                Err(e) if is_aborted(&e) => {}
                other => return Err(format!("join: expected ConstructAborted, got {other:?}")),
            }
        }
        let ev = next_event(&aborted, "GROUP_CONSTRUCT_ABORT")?;
        check_group_event(&ev, "construct-abort", id, None, None, None)?;
        if me == n - 1 {
            let start = std::time::Instant::now();
            match c.group_join(id, &leader, true, Some(Duration::from_secs(10)), vec![]) {
                Ok(g) => return Err(format!("a join after the abort succeeded: {g:?}")),
                Err(CohortError::Timeout { .. }) => {
                    return Err("a join after the abort waited for its timeout".into())
                }
                Err(e) => check!(
                    start.elapsed() < Duration::from_secs(5),
                    "a join after the abort took {:?} to fail ({e})",
                    start.elapsed()
                ),
            }
        }
    }
    check!(
        c.group_query(id).is_err(),
        "the aborted group can be queried"
    );
    fence_all(&c)?;
    println!("RESULT aborted");
    e2s(c.finalize(), "finalize")
}

/// The last rank receives its invitation and ends without answering: the leader gets
/// GROUP_INVITE_FAILED naming it and the group completes without it.
fn invite_member_dies() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "inv-dies";
    let leader = p(&c, 0);
    let dying = p(&c, n - 1);
    let invitees: Vec<ProcId> = (1..n).map(|r| p(&c, r)).collect();
    let members: Vec<ProcId> = all(&c).into_iter().filter(|q| q != &dying).collect();
    let complete = event_channel(&c, &[codes::GROUP_CONSTRUCT_COMPLETE]);
    let failed = event_channel(&c, &[codes::GROUP_INVITE_FAILED]);
    let invited = event_channel(&c, &[codes::GROUP_INVITED]);
    let (errs_tx, errs) = crossbeam_channel::unbounded();
    if me != 0 && me != n - 1 {
        let h = accept_in_handler(id, leader.clone(), Some(invitees.clone()), None, errs_tx);
        c.register_event_handler(Some(&[codes::GROUP_INVITED]), h);
    }
    fence_all(&c)?;
    let g = if me == n - 1 {
        let ev = next_event(&invited, "GROUP_INVITED")?;
        check_invitation(&ev, id, &leader, Some(&invitees))?;
        return e2s(c.finalize(), "finalize");
    } else if me == 0 {
        let g = lead_invite(
            &c,
            id,
            &invitees,
            invite_opts(),
            &complete,
            &members,
            std::slice::from_ref(&dying),
        )?;
        let ev = next_event(&failed, "GROUP_INVITE_FAILED")?;
        check_group_event(&ev, "invite-failed", id, None, None, None)?;
        check!(
            ev.affected == vec![dying.clone()],
            "invite-failed affects {:?}",
            ev.affected
        );
        g
    } else {
        let ev = next_event(&complete, "GROUP_CONSTRUCT_COMPLETE");
        handler_errors(&errs)?;
        check_group_event(&ev?, "construct-complete", id, None, None, Some(&members))?;
        e2s(c.group_query(id), "query after CONSTRUCT_COMPLETE")?
    };
    use_group(&c, &g)?;
    println!(
        "RESULT members={} ctx={}",
        ranks(&g.members),
        g.context_id.unwrap_or(0)
    );
    destruct(&c, id)?;
    e2s(c.finalize(), "finalize")
}

/// The invite leader dies (SIGABRT) after inviting, before the last invitee answered
/// (run with --enable-recovery). The invitees that accepted get LEADER_FAILED; rank 1
/// claims leadership and wins; rank 2's later claim gets NotLeader naming rank 1;
/// everyone else gets LEADER_SELECTED naming rank 1; the new leader gets the last
/// invitee's ACCEPTED event and the group completes with the survivors.
fn invite_leader_dies() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "inv-ldr";
    let leader = p(&c, 0);
    let claimant = p(&c, 1);
    let invitees: Vec<ProcId> = (1..n).map(|r| p(&c, r)).collect();
    let complete = event_channel(&c, &[codes::GROUP_CONSTRUCT_COMPLETE]);
    let leader_failed = event_channel(&c, &[codes::GROUP_LEADER_FAILED]);
    let selected = event_channel(&c, &[codes::GROUP_LEADER_SELECTED]);
    let accepted = event_channel(&c, &[codes::GROUP_INVITE_ACCEPTED]);
    let invited = event_channel(&c, &[codes::GROUP_INVITED]);
    fence_all(&c)?;
    if me == 0 {
        let _invite = c.group_invite_async(id, &invitees, invite_opts());
        std::thread::sleep(Duration::from_millis(1000));
        std::process::abort();
    }
    let ev = next_event(&invited, "GROUP_INVITED")?;
    check_invitation(&ev, id, &leader, Some(&invitees))?;
    let last = me == n - 1;
    if last {
        // Answer only once the leader is long dead and a new one elected.
        std::thread::sleep(Duration::from_millis(3000));
    }
    let join = c.group_join_async(id, &leader, true, join_timeout(), vec![]);
    if !last {
        let ev = next_event(&leader_failed, "GROUP_LEADER_FAILED")?;
        check_group_event(&ev, "leader-failed", id, Some(&leader), None, None)?;
    }
    if me == 1 {
        e2s(
            c.group_construct_decide(id, ConstructDecision::ClaimLeadership),
            "claim leadership",
        )?;
    } else {
        let ev = next_event(&selected, "GROUP_LEADER_SELECTED")?;
        check_group_event(
            &ev,
            "leader-selected",
            id,
            Some(&claimant),
            Some(&claimant),
            None,
        )?;
        if me == 2 {
            match c.group_construct_decide(id, ConstructDecision::ClaimLeadership) {
                Err(e @ CohortError::NotLeader { .. }) => check!(
                    e.to_string().contains(&claimant.to_string()),
                    "NotLeader does not name the leader {claimant}: {e}"
                ),
                other => return Err(format!("second claim: expected NotLeader, got {other:?}")),
            }
        }
    }
    let survivors: Vec<ProcId> = invitees.clone();
    let g =
        e2s(await_reply(join, "join")?, "join")?.ok_or("an accepting join returned no group")?;
    check!(g.members == survivors, "members {}", ranks(&g.members));
    let ev = next_event(&complete, "GROUP_CONSTRUCT_COMPLETE")?;
    let info = check_group_event(&ev, "construct-complete", id, None, None, Some(&survivors))?;
    check!(
        info.context_id == g.context_id,
        "complete event ctx {:?}, join ctx {:?}",
        info.context_id,
        g.context_id
    );
    if me == 1 {
        let ev = next_event(&accepted, "GROUP_INVITE_ACCEPTED (at the new leader)")?;
        check_group_event(&ev, "accepted", id, Some(&p(&c, n - 1)), None, None)?;
    }
    use_group(&c, &g)?;
    println!("{} leader={}", result_line(&g), claimant.rank);
    destruct(&c, id)?;
    e2s(c.finalize(), "finalize")
}

/// Collective construct whose designated leader (rank 0, PMIX_GROUP_LEADER) dies after
/// calling while the last rank has not called yet (run with --enable-recovery): the
/// callers get LEADER_FAILED naming it; rank 1 decides Abort from its handler; every
/// caller's construct fails with ConstructAborted and the others get CONSTRUCT_ABORT.
fn construct_leader_dies_abort() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "cons-ldr";
    let leader = p(&c, 0);
    let leader_failed = event_channel(&c, &[codes::GROUP_LEADER_FAILED]);
    let aborted = event_channel(&c, &[codes::GROUP_CONSTRUCT_ABORT]);
    let (decided_tx, decided) = crossbeam_channel::unbounded();
    if me == 1 {
        c.register_event_handler(Some(&[codes::GROUP_LEADER_FAILED]), move |c, ev| {
            let r = if GroupEventInfo::of(ev).id.as_deref() == Some(id) {
                c.group_construct_decide(id, ConstructDecision::Abort)
                    .map_err(|e| format!("decide Abort: {e}"))
            } else {
                Err(format!("leader-failed event for another group: {ev:?}"))
            };
            let _ = decided_tx.send(r);
        });
    }
    fence_all(&c)?;
    if me == 0 {
        let opts = ConstructOpts {
            leader: true,
            ..mctx()
        };
        let _construct = c.group_construct_async(id, &all(&c), opts);
        std::thread::sleep(Duration::from_millis(500));
        std::process::abort();
    }
    let survivors: Vec<ProcId> = (1..n).map(|r| p(&c, r)).collect();
    if me == n - 1 {
        // Listed but never calls: keeps the construct pending until the abort.
        e2s(c.fence(&survivors, FenceOpts::default()), "survivor fence")?;
        return e2s(c.finalize(), "finalize");
    }
    match c.group_construct(id, &all(&c), mctx()) {
        Err(CohortError::ConstructAborted { id: got, .. }) if got == id => {}
        other => return Err(format!("expected ConstructAborted, got {other:?}")),
    }
    let ev = next_event(&leader_failed, "GROUP_LEADER_FAILED")?;
    check_group_event(&ev, "leader-failed", id, Some(&leader), None, None)?;
    if me == 1 {
        decided
            .recv_timeout(EVENT_WAIT)
            .map_err(|_| "the LEADER_FAILED handler never ran")??;
    } else {
        let ev = next_event(&aborted, "GROUP_CONSTRUCT_ABORT")?;
        check_group_event(&ev, "construct-abort", id, None, None, None)?;
    }
    e2s(c.fence(&survivors, FenceOpts::default()), "survivor fence")?;
    println!("RESULT aborted");
    e2s(c.finalize(), "finalize")
}

/// notify-termination with a designated leader (rank 0): the last rank ends before
/// calling; only the leader gets MEMBER_FAILED; rank 1's attempt to decide is refused
/// with NotLeader; the leader decides Continue and everyone gets PartialSuccess with
/// the failed rank listed.
fn collective_member_dies_notify() -> R {
    const PLEASE_TRY: i32 = 7001;
    const TRIED: i32 = 7002;
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "cons-notify";
    let dying = p(&c, n - 1);
    if me == n - 1 {
        return e2s(c.finalize(), "finalize");
    }
    let member_failed = event_channel(&c, &[codes::GROUP_MEMBER_FAILED]);
    let pings = event_channel(&c, &[PLEASE_TRY, TRIED]);
    let opts = ConstructOpts {
        notify_termination: true,
        leader: me == 0,
        ..mctx()
    };
    let construct = c.group_construct_async(id, &all(&c), opts);
    match me {
        0 => {
            let ev = next_event(&member_failed, "GROUP_MEMBER_FAILED")?;
            check_group_event(&ev, "member-failed", id, None, None, None)?;
            check!(
                ev.affected == vec![dying.clone()],
                "member-failed affects {:?}",
                ev.affected
            );
            // Let rank 1 try to decide while the construct waits for us.
            e2s(
                c.notify(PLEASE_TRY, Range::Procs(vec![p(&c, 1)]), vec![]),
                "notify rank 1",
            )?;
            let ev = next_event(&pings, "rank 1's report")?;
            check!(ev.code == TRIED, "unexpected event {}", ev.code);
            if let Some(Value::Str(e)) = cohort::info_get(&ev.info, "error") {
                return Err(format!("rank 1: {e}"));
            }
            e2s(
                c.group_construct_decide(id, ConstructDecision::Continue),
                "decide Continue",
            )?;
        }
        1 => {
            let ev = next_event(&pings, "the leader's go-ahead")?;
            check!(ev.code == PLEASE_TRY, "unexpected event {}", ev.code);
            let outcome = match c.group_construct_decide(id, ConstructDecision::Continue) {
                Err(CohortError::NotLeader { .. }) => Ok(()),
                other => Err(format!(
                    "a non-leader's decision: expected NotLeader, got {other:?}"
                )),
            };
            let info = match &outcome {
                Ok(()) => vec![],
                Err(e) => vec![("error".to_string(), Value::Str(e.clone()))],
            };
            e2s(
                c.notify(TRIED, Range::Procs(vec![p(&c, 0)]), info),
                "notify leader",
            )?;
            outcome?;
        }
        _ => {}
    }
    let g = e2s(await_reply(construct, "construct")?, "construct")?;
    let members: Vec<ProcId> = all(&c).into_iter().filter(|q| q != &dying).collect();
    check!(
        g.status == ConstructStatus::PartialSuccess,
        "status {:?}",
        g.status
    );
    check!(
        g.failed == vec![dying.clone()],
        "failed {}",
        ranks(&g.failed)
    );
    check!(g.members == members, "members {}", ranks(&g.members));
    e2s(c.fence(&members, FenceOpts::default()), "member fence")?;
    if me != 0 {
        check!(
            member_failed.try_recv().is_err(),
            "a non-leader got GROUP_MEMBER_FAILED"
        );
    }
    println!("{}", result_line(&g));
    destruct(&c, id)?;
    e2s(c.finalize(), "finalize")
}

/// A bootstrap leader that never calls cannot be named by anyone (only the count is
/// known), so only the timeout ends the construct: leader 0 and its add-members get
/// Timeout after the 2 s they asked for.
fn bootstrap_leader_missing() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    if me == n - 1 {
        return e2s(c.finalize(), "finalize");
    }
    let mut opts = ConstructOpts {
        timeout_ms: Some(2000),
        ..Default::default()
    };
    let procs = if me == 0 {
        opts.bootstrap = Some(2);
        opts.add_members = (1..n - 1).map(|r| p(&c, r)).collect();
        vec![p(&c, 0)]
    } else {
        vec![]
    };
    let start = std::time::Instant::now();
    match c.group_construct("boot-lost", &procs, opts) {
        Err(CohortError::Timeout { timeout_ms, .. }) => {
            check!(timeout_ms == 2000, "timeout_ms {timeout_ms}")
        }
        other => return Err(format!("expected Timeout, got {other:?}")),
    }
    check!(
        start.elapsed() >= Duration::from_millis(1900),
        "timed out after {:?}",
        start.elapsed()
    );
    println!("RESULT timeout-ok");
    e2s(c.finalize(), "finalize")
}

/// The last invitee never answers (it is alive, it just ignores the invitation): the
/// construct fails with Timeout after the leader's 2 s, naming it, for the leader and
/// for the invitees blocked in their join.
fn invite_timeout() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "inv-slow";
    let leader = p(&c, 0);
    let silent = p(&c, n - 1);
    let invitees: Vec<ProcId> = (1..n).map(|r| p(&c, r)).collect();
    let invited = event_channel(&c, &[codes::GROUP_INVITED]);
    fence_all(&c)?;
    let expect_timeout = |r: Result<(), CohortError>, what: &str| -> R {
        match r {
            Err(CohortError::Timeout { missing, .. }) => {
                check!(
                    missing == vec![silent.clone()],
                    "{what}: timeout names {}",
                    ranks(&missing)
                );
                Ok(())
            }
            other => Err(format!("{what}: expected Timeout, got {other:?}")),
        }
    };
    if me == 0 {
        let opts = InviteOpts {
            timeout_ms: Some(2000),
            ..invite_opts()
        };
        expect_timeout(c.group_invite(id, &invitees, opts).map(|_| ()), "invite")?;
    } else {
        let ev = next_event(&invited, "GROUP_INVITED")?;
        check_invitation(&ev, id, &leader, Some(&invitees))?;
        if me == n - 1 {
            std::thread::sleep(Duration::from_millis(3000));
        } else {
            let r = c.group_join(id, &leader, true, join_timeout(), vec![]);
            expect_timeout(r.map(|_| ()), "join")?;
        }
    }
    fence_all(&c)?;
    println!("RESULT timeout-ok");
    e2s(c.finalize(), "finalize")
}

/// Without optional participation or notify-termination, a named add-member (rank n-2,
/// named by leader 0) ending before calling fails the bootstrap construct for every
/// caller with ProcTerminated naming it.
fn bootstrap_member_dies_required() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let dying = n - 2;
    if me == dying {
        return e2s(c.finalize(), "finalize");
    }
    let mut opts = mctx();
    let procs = if me == 0 || me == n - 1 {
        opts.bootstrap = Some(2);
        opts.add_members = bootstrap_adds(&c, me);
        vec![p(&c, me)]
    } else {
        vec![]
    };
    match c.group_construct("boot-req", &procs, opts) {
        Err(CohortError::ProcTerminated { procs, .. }) => {
            check!(procs == vec![p(&c, dying)], "terminated {}", ranks(&procs))
        }
        other => return Err(format!("expected ProcTerminated, got {other:?}")),
    }
    println!("RESULT required-ok");
    e2s(c.finalize(), "finalize")
}

/// `decide_declines`: rank 1 declines; completion waits for the leader, which decides
/// Continue only a second later; the group then completes without rank 1.
fn invite_decline_continue() -> R {
    const HOLD: Duration = Duration::from_millis(1000);
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "inv-cont";
    let leader = p(&c, 0);
    let decliner = p(&c, 1);
    let invitees: Vec<ProcId> = (1..n).map(|r| p(&c, r)).collect();
    let members: Vec<ProcId> = all(&c).into_iter().filter(|q| q != &decliner).collect();
    let complete = event_channel(&c, &[codes::GROUP_CONSTRUCT_COMPLETE]);
    let invited = event_channel(&c, &[codes::GROUP_INVITED]);
    let (errs_tx, errs) = crossbeam_channel::unbounded();
    let (decided_tx, decided) = crossbeam_channel::unbounded();
    if me == 0 {
        let decliner_ = decliner.clone();
        c.register_event_handler(Some(&[codes::GROUP_INVITE_DECLINED]), move |c, ev| {
            let r = check_group_event(ev, "declined", id, Some(&decliner_), None, None).and_then(
                |_| {
                    std::thread::sleep(HOLD);
                    let at = std::time::Instant::now();
                    c.group_construct_decide(id, ConstructDecision::Continue)
                        .map(|()| at)
                        .map_err(|e| format!("decide Continue: {e}"))
                },
            );
            let _ = decided_tx.send(r);
        });
    } else if me > 1 {
        let h = accept_in_handler(id, leader.clone(), Some(invitees.clone()), None, errs_tx);
        c.register_event_handler(Some(&[codes::GROUP_INVITED]), h);
    }
    fence_all(&c)?;
    let opts = InviteOpts {
        decide_declines: true,
        ..invite_opts()
    };
    let g = match me {
        0 => {
            let g = lead_invite(&c, id, &invitees, opts, &complete, &members, &[])?;
            let returned = std::time::Instant::now();
            let at = decided
                .recv_timeout(EVENT_WAIT)
                .map_err(|_| "the DECLINED handler never ran")??;
            check!(
                returned >= at,
                "the invite returned before the leader decided"
            );
            Some(g)
        }
        1 => {
            let ev = next_event(&invited, "GROUP_INVITED")?;
            check_invitation(&ev, id, &leader, Some(&invitees))?;
            let got = e2s(
                c.group_join(id, &leader, false, join_timeout(), vec![]),
                "declining join",
            )?;
            check!(got.is_none(), "a declining join returned a group");
            None
        }
        _ => {
            let ev = next_event(&complete, "GROUP_CONSTRUCT_COMPLETE");
            handler_errors(&errs)?;
            check_group_event(&ev?, "construct-complete", id, None, None, Some(&members))?;
            Some(e2s(c.group_query(id), "query after CONSTRUCT_COMPLETE")?)
        }
    };
    if let Some(g) = &g {
        use_group(&c, g)?;
    }
    fence_all(&c)?;
    match g {
        Some(g) => {
            println!("{}", result_line(&g));
            destruct(&c, id)?;
        }
        None => check_not_member(&c, id)?,
    }
    e2s(c.finalize(), "finalize")
}

/// notify-termination without a designated leader: the last rank ends before calling;
/// every caller gets MEMBER_FAILED; rank 1 decides Continue; everyone gets
/// PartialSuccess listing the failed rank.
fn collective_member_dies_notify_anyone() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let id = "cons-notify-any";
    let dying = p(&c, n - 1);
    if me == n - 1 {
        return e2s(c.finalize(), "finalize");
    }
    let member_failed = event_channel(&c, &[codes::GROUP_MEMBER_FAILED]);
    let opts = ConstructOpts {
        notify_termination: true,
        ..mctx()
    };
    let construct = c.group_construct_async(id, &all(&c), opts);
    let ev = next_event(&member_failed, "GROUP_MEMBER_FAILED")?;
    check_group_event(&ev, "member-failed", id, None, None, None)?;
    check!(
        ev.affected == vec![dying.clone()],
        "member-failed affects {:?}",
        ev.affected
    );
    if me == 1 {
        e2s(
            c.group_construct_decide(id, ConstructDecision::Continue),
            "decide Continue",
        )?;
    }
    let g = e2s(await_reply(construct, "construct")?, "construct")?;
    let members: Vec<ProcId> = all(&c).into_iter().filter(|q| q != &dying).collect();
    check!(
        g.status == ConstructStatus::PartialSuccess,
        "status {:?}",
        g.status
    );
    check!(
        g.failed == vec![dying.clone()],
        "failed {}",
        ranks(&g.failed)
    );
    check!(g.members == members, "members {}", ranks(&g.members));
    println!("{}", result_line(&g));
    destruct(&c, id)?;
    e2s(c.finalize(), "finalize")
}

/// The job `cohort-sim replay` simulates: every rank posts `cohort_proto::digest`'s
/// value (64 bytes), constructs the comparison group with a context id and one
/// group-info entry, reads every member's value back, and prints its digest line.
fn sim_compare() -> R {
    use cohort_proto::digest;
    let c = init()?;
    let me = c.rank();
    e2s(
        c.put(
            Scope::Remote,
            digest::DATA_KEY,
            digest::posted_value(me, 64),
        ),
        "put",
    )?;
    let mut opts = ctx();
    opts.group_info = vec![(digest::INFO_KEY.into(), Value::U32(me))];
    let g = e2s(
        c.group_construct(digest::COMPARE_GROUP, &all(&c), opts),
        "construct",
    )?;
    let mut data = Vec::new();
    for m in &g.members {
        let v = e2s(
            c.get(m, digest::DATA_KEY, Some(Duration::from_secs(10))),
            "get",
        )?;
        data.push((m.clone(), v));
    }
    println!(
        "SIM {}",
        digest::group_view_line(me, &g.members, g.context_id, &g.group_info, &data)
    );
    Ok(())
}

/// Run with one rank per node server, 8 servers and `--enable-recovery`. The rank on an
/// interior server of the construct's tree (below the root) SIGKILLs its own node
/// server once the others are waiting in an optional construct; the others must end
/// with partial success without it — from the loss itself (issue 4: an interior node
/// server's failure must not strand its subtree), well inside their 60 s timeout.
fn lost_interior() -> R {
    const GID: &str = "lost-interior";
    let c = init()?;
    let n = c.size();
    let nodes: Vec<u32> = (0..n).collect();
    let root = nodes[cohort_topology::rendezvous(GID, nodes.len())];
    let tree = cohort_topology::Tree::new(&nodes, root, cohort_topology::default_shape(n as usize));
    let x = tree
        .children_largest_first(root)
        .into_iter()
        .find(|&k| !tree.children(k).is_empty())
        .ok_or("no interior server below the root: run with --nodes 8 -n 8")?;
    if c.rank() == x {
        // Let the others call and x's children send their contributions to x first.
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: plain syscalls; the parent is this rank's node server.
        unsafe { libc::kill(libc::getppid(), libc::SIGKILL) };
        std::thread::sleep(Duration::from_secs(60));
        return Err("outlived its node server".into());
    }
    let opts = ConstructOpts {
        optional: true,
        ..ctx()
    };
    let g = e2s(c.group_construct(GID, &all(&c), opts), "construct")?;
    partial_without(c, &g, &[x])
}

/// A survivor's check of an optional construct that lost ranks `lost`: partial
/// success without them; prints `RESULT` for the harness to compare across survivors.
fn partial_without(c: Client, g: &GroupResult, lost: &[u32]) -> R {
    check!(
        g.status == ConstructStatus::PartialSuccess,
        "status {:?}",
        g.status
    );
    let mut expected: Vec<ProcId> = lost.iter().map(|&x| p(&c, x)).collect();
    expected.sort();
    check!(g.failed == expected, "failed {}", ranks(&g.failed));
    println!(
        "RESULT lost={} members={} ctx={:?}",
        ranks(&expected),
        ranks(&g.members),
        g.context_id
    );
    e2s(c.finalize(), "finalize")
}

/// Run with one rank per node server and `--enable-recovery`. Every rank fences (so
/// the servers have talked to each other); once every rank is past the fence, one rank
/// (not on the construct's root server) SIGKILLs its own node server, and the others
/// construct only after the loss, optional, over every rank: partial success without
/// the lost rank. With the
/// dissemination allgather every survivor sets up its rounds knowing a server of them
/// is lost, so it sends straight to the root instead of waiting for that server's
/// rounds (which used to hang until the 60 s timeout).
fn construct_after_loss() -> R {
    construct_after_losing("after-loss", 1)
}

/// As `construct-after-loss`, with the lost node server the group id's rendezvous
/// itself (the construct's root; its rank is a listed process as well): the construct
/// meets at the id's next rendezvous, so the id stays usable.
fn construct_after_rendezvous_loss() -> R {
    construct_after_losing("after-rendezvous-loss", 0)
}

/// Node server `root + offset` (the root: the group id's rendezvous) is SIGKILLed once
/// every rank is past a fence; 2 s later the survivors construct the id, optional:
/// partial success without its rank.
fn construct_after_losing(gid: &'static str, offset: u32) -> R {
    let c = init()?;
    let n = c.size();
    let root = cohort_topology::rendezvous(gid, n as usize) as u32;
    let x = (root + offset) % n;
    // x's server may be the fence's root.
    if let Some(pids) = server_pids_past_fence(&c, x)? {
        // SAFETY: kill(2) on this rank's own node server.
        unsafe { libc::kill(pids[x as usize] as libc::pid_t, libc::SIGKILL) };
        std::thread::sleep(Duration::from_secs(60));
        return Err("outlived its node server".into());
    }
    // The loss reaches every server (a broken connection, or another server's word).
    std::thread::sleep(Duration::from_secs(2));
    let opts = ConstructOpts {
        optional: true,
        ..ctx()
    };
    let g = e2s(c.group_construct(gid, &all(&c), opts), "construct")?;
    partial_without(c, &g, &[x])
}

/// The last rank publishes `p-last` (persistence: until it ends) and `a-last` (the
/// application's), everyone fences, and it finalizes and exits normally. The job's
/// data store (the launcher's) drops `p-last` when that rank's exit is reported: the
/// others see it gone within 30 s, while `a-last` stays.
fn publish_persistence() -> R {
    use cohort::{DataRange, LookupOpts, Persistence};
    let c = init()?;
    let (me, n) = (c.rank(), c.size());
    check!(n >= 2, "run with 2 ranks or more, not {n}");
    if me == n - 1 {
        for (key, p) in [("p-last", Persistence::Proc), ("a-last", Persistence::App)] {
            let data = vec![(key.into(), Value::U32(me))];
            e2s(c.publish(data, DataRange::Session, p), "publish")?;
        }
    }
    e2s(c.fence(&[], FenceOpts::default()), "fence")?;
    println!("RESULT publish-persistence ok");
    if me == n - 1 {
        return e2s(c.finalize(), "finalize");
    }
    let found = |key: &str| -> Result<bool, String> {
        Ok(!e2s(c.lookup(&[key], LookupOpts::default()), "lookup")?.is_empty())
    };
    check!(found("p-last")? || found("a-last")?, "nothing published");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while found("p-last")? {
        check!(
            std::time::Instant::now() < deadline,
            "p-last still there 30 s after its publisher's exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    check!(found("a-last")?, "a-last went with its publisher");
    e2s(c.finalize(), "finalize")
}

/// Run with one rank per node server (3 or more) and `--enable-recovery`. The job's
/// data store (publish/lookup) is the launcher's, so losing a node server — node 0
/// here — keeps it. Rank 0 publishes `before` and its server's pid; every other rank
/// starts a lookup that waits, without a timeout, for `after-loss`, then publishes
/// `ready-<rank>`. Rank 1 SIGKILLs node server 0 once all is published, then
/// publishes `killed`; the survivors construct a group (optional, over every rank:
/// partial success once rank 0 is known lost), then the last rank publishes
/// `after-loss`.
/// Every survivor's waiting lookup must be answered with it, `before` must still be
/// there, and rank 0's proc-persistent `rank0-only` gone.
fn publish_after_loss() -> R {
    use cohort::{DataRange, LookupOpts, Persistence};
    let c = init()?;
    let n = c.size();
    check!(n >= 3, "run with 3 ranks or more, not {n}");
    let me = c.rank();
    let publish = |key: &str, v: Value| publish_app(&c, key, v);
    let wait_for = |keys: &[&str]| wait_published(&c, keys);
    if me == 0 {
        // SAFETY: getppid has no preconditions; the parent is this rank's node server.
        let server = unsafe { libc::getppid() };
        publish("before", Value::U32(7))?;
        let mine = vec![("rank0-only".into(), Value::U32(1))];
        e2s(
            c.publish(mine, DataRange::Session, Persistence::Proc),
            "publish rank0-only",
        )?;
        publish("store-pid", Value::U32(server as u32))?;
        std::thread::sleep(Duration::from_secs(60));
        return Err("outlived its node server".into());
    }
    let waiting = LookupOpts {
        wait: Some(0),
        ..LookupOpts::default()
    };
    let after = c.lookup_async(&["after-loss"], waiting);
    publish(&format!("ready-{me}"), Value::Bool(true))?;
    if me == 1 {
        let mut keys: Vec<String> = (1..n).map(|r| format!("ready-{r}")).collect();
        keys.push("store-pid".into());
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let found = wait_for(&refs)?;
        let pid = found
            .iter()
            .find_map(|f| match (&*f.key, &f.value) {
                ("store-pid", Value::U32(p)) => Some(*p),
                _ => None,
            })
            .ok_or("no store-pid")?;
        // SAFETY: kill(2) on node server 0 of this job.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        publish("killed", Value::Bool(true))?;
    }
    if me == n - 1 {
        wait_for(&["killed"])?;
    }
    // Every survivor's server knows rank 0 is gone (its construct leaves it out).
    let opts = ConstructOpts {
        optional: true,
        ..ctx()
    };
    // A group whose root is not the lost server.
    let gid = (0..)
        .map(|i| format!("after-loss-{i}"))
        .find(|id| cohort_topology::rendezvous(id, n as usize) != 0)
        .expect("some id");
    let g = e2s(c.group_construct(&gid, &all(&c), opts), "construct")?;
    check!(
        g.status == ConstructStatus::PartialSuccess && g.failed == [p(&c, 0)],
        "construct after the loss: {:?}, failed {}",
        g.status,
        ranks(&g.failed)
    );
    if me == n - 1 {
        publish("after-loss", Value::U32(42))?;
    }
    let got = e2s(await_reply(after, "waiting lookup")?, "waiting lookup")?;
    check!(
        got.len() == 1 && got[0].value == Value::U32(42) && got[0].publisher.rank == n - 1,
        "waiting lookup: {got:?}"
    );
    let before = wait_for(&["before"])?;
    check!(
        before.len() == 1 && before[0].value == Value::U32(7) && before[0].publisher.rank == 0,
        "before: {before:?}"
    );
    // Rank 0's proc-persistent value went with it.
    let gone = e2s(c.lookup(&["rank0-only"], LookupOpts::default()), "lookup")?;
    check!(gone.is_empty(), "rank0-only outlived rank 0: {gone:?}");
    println!("RESULT publish-after-loss: waiting lookups answered, the lost node's data kept");
    Ok(())
}

/// Run with one rank per node server, `--enable-recovery` and a short `--peer-timeout`.
/// Every rank fences, then the node server after the construct's root is stopped with
/// SIGSTOP: it closes no connection, so only the failure detector can find it. The
/// others construct at once, optional, over every rank and with no timeout: partial
/// success without the frozen server's rank once it is declared lost (without the
/// detector they would wait for ever).
fn frozen_server() -> R {
    silent_servers("frozen", 1, |_, _, pid| freeze(pid))
}

/// As `frozen-server`, with the two node servers after the construct's root frozen
/// at once (their rack lost power): the outer one's watcher reports it, and the inner
/// one, whose watcher is the outer one, is found by the launcher asking every server.
fn two_frozen() -> R {
    silent_servers("two-frozen", 2, |_, _, pid| freeze(pid))
}

fn freeze(pid: u32) -> R {
    // SAFETY: kill(2) on a node server of this job.
    check!(
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) } == 0,
        "SIGSTOP to {pid}: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// As `frozen-server`, but the node server stays up and the network drops every
/// packet to and from its fabric address (`ip rule … blackhole`; run in a network
/// namespace of its own, as root, with the `local` table's rule moved after
/// preference 11): its connections stall without breaking, and it hears nobody
/// either, so it reports its own watched server silent too.
fn cut_off() -> R {
    silent_servers("cut-off", 1, |_, x, _| blackhole(x))
}

/// As `cut-off`, with the two node servers after the construct's root cut off: each
/// hears nobody, and the outer one reports the inner one.
fn two_cut_off() -> R {
    silent_servers("two-cut-off", 2, |_, x, _| blackhole(x))
}

/// Node `x`'s fabric address: entry x of COHORT_TEST_NODE_ADDRS (comma-separated, as
/// given to `cohort run --node-addrs`), else cohort run's default 127.0.1.(x+1).
fn node_addr(x: u32) -> String {
    match std::env::var("COHORT_TEST_NODE_ADDRS") {
        Ok(list) => list
            .split(',')
            .nth(x as usize)
            .unwrap_or_default()
            .trim()
            .to_string(),
        Err(_) => format!("127.0.1.{}", x + 1),
    }
}

/// Drops every packet to and from node `x`'s fabric address ([`node_addr`]; see
/// `cut-off`), with `ip rule … blackhole`, or with the shell command
/// COHORT_TEST_CUT_CMD given that address as `$ADDR` (policy routing does not stop
/// soft-RoCE traffic between addresses of one host, for one).
fn blackhole(x: u32) -> R {
    let addr = node_addr(x);
    if let Ok(cmd) = std::env::var("COHORT_TEST_CUT_CMD") {
        let st = std::process::Command::new("sh")
            .args(["-c", &cmd])
            .env("ADDR", &addr)
            .status()
            .map_err(|e| format!("cannot run sh: {e}"))?;
        check!(st.success(), "{cmd} (ADDR={addr}): {st}");
        return Ok(());
    }
    ip_rules(&[("10", &["to", &addr]), ("11", &["from", &addr])])
}

/// As `cut-off`, but only the packets between node x and the construct's root server
/// are dropped (a partial partition): both still reach every other server, and x's
/// watcher still hears it. Their connections stall and break after the peer timeout,
/// the launcher surveys both, and x goes: it has the higher node id (the group id is
/// chosen so) and reaches as many servers as the root's.
fn partial_cut() -> R {
    silent_servers("cut-apart", 1, |root, x, _| {
        check!(
            x > root,
            "the group id's root server is the last one: pick another id"
        );
        let (a, b) = (node_addr(root), node_addr(x));
        ip_rules(&[
            ("10", &["from", &a, "to", &b]),
            ("11", &["from", &b, "to", &a]),
        ])
    })
}

/// `ip rule add pref PREF SELECTOR… blackhole` for each rule.
fn ip_rules(rules: &[(&str, &[&str])]) -> R {
    for (pref, selector) in rules {
        let st = std::process::Command::new("ip")
            .args(["rule", "add", "pref", pref])
            .args(*selector)
            .arg("blackhole")
            .status()
            .map_err(|e| format!("cannot run ip: {e}"))?;
        check!(st.success(), "ip rule add {}: {st}", selector.join(" "));
    }
    Ok(())
}

/// One rank per node server: every rank fences and posts its node server's pid (its
/// parent); rank `reader` reads them all, by rank (`None` at the others). A fence
/// returning at one rank does not mean its outcome reached every server yet, but each
/// pid is posted after its rank's fence returned: once `reader` has them all, every
/// rank is past the fence.
fn server_pids_past_fence(c: &Client, reader: u32) -> Result<Option<Vec<u32>>, String> {
    let fence = FenceOpts {
        collect: false,
        timeout_ms: Some(60_000),
        ft_collective: false,
    };
    e2s(c.fence(&[], fence), "fence")?;
    // SAFETY: getppid has no preconditions; the parent is this rank's node server.
    let server = unsafe { libc::getppid() };
    e2s(
        c.put(Scope::Remote, "server-pid", server.to_string()),
        "put",
    )?;
    e2s(c.commit(), "commit")?;
    if c.rank() != reader {
        return Ok(None);
    }
    let mut pids = vec![server as u32; c.size() as usize];
    for r in (0..c.size()).filter(|&r| r != reader) {
        let v = c.get(&p(c, r), "server-pid", Some(Duration::from_secs(60)));
        pids[r as usize] = match e2s(v, "get")? {
            Value::Str(s) => s.parse().map_err(|e| format!("pid {s:?}: {e}"))?,
            other => return Err(format!("server-pid of rank {r}: {other:?}")),
        };
    }
    Ok(Some(pids))
}

/// One rank per node server. Once every rank is past a fence
/// ([`server_pids_past_fence`]), the rank on the construct's root server silences the
/// `count` servers after the root with `silence(root, node, pid)`. Their ranks wait to be killed with them; the others
/// construct (optional, over every rank, no timeout) and must get partial success
/// without them.
fn silent_servers(gid: &str, count: u32, silence: impl Fn(u32, u32, u32) -> R) -> R {
    let c = init()?;
    let n = c.size();
    let root = cohort_topology::rendezvous(gid, n as usize) as u32;
    let silenced: Vec<u32> = (1..=count).map(|k| (root + k) % n).collect();
    if let Some(pids) = server_pids_past_fence(&c, root)? {
        for &x in &silenced {
            silence(root, x, pids[x as usize])?;
        }
    }
    if silenced.contains(&c.rank()) {
        // Killed with its node server once that is declared lost.
        std::thread::sleep(Duration::from_secs(60));
        return Err("outlived its silent node server".into());
    }
    let opts = ConstructOpts {
        optional: true,
        assign_context_id: true,
        timeout_ms: None,
        ..Default::default()
    };
    let g = e2s(c.group_construct(gid, &all(&c), opts), "construct")?;
    partial_without(c, &g, &silenced)
}

/// The failure views of a group (spec/mpi3-ft-validate-local-global.txt), 6 ranks.
/// All construct "fv"; rank 3 leaves (and ends normally), rank 5 aborts. The others
/// ask for the global view: {5}, all of it new; their local view is then {5}, nothing
/// new. With more than one node server, rank 4 then kills its node server (SIGKILL)
/// once the others are past a fence: the survivors' next global view is {4, 5}, 4 new
/// (a call decided by the lost server fails with PeerLost and is made again). Each
/// survivor prints `RESULT view1=… view2=…`.
fn failure_views() -> R {
    const ID: &str = "fv";
    let c = init()?;
    let me = c.rank();
    check!(c.size() == 6, "run with -n 6, not {}", c.size());
    let g = e2s(c.group_construct(ID, &all(&c), ctx()), "construct")?;
    check!(g.members == all(&c), "members {}", ranks(&g.members));
    match me {
        5 => std::process::abort(),
        3 => {
            e2s(c.group_leave(ID), "leave")?;
            return e2s(c.finalize(), "finalize");
        }
        _ => {}
    }
    let timeout = Some(Duration::from_secs(60));
    let view = |c: &Client| e2s(c.group_failed_global(ID, timeout), "global view");
    let v1 = view(&c)?;
    check!(v1.failed == vec![p(&c, 5)], "view 1: {}", ranks(&v1.failed));
    check!(v1.new == v1.failed, "view 1 new: {}", ranks(&v1.new));
    let l = e2s(c.group_failed_local(ID), "local view")?;
    check!(l.failed == v1.failed, "local view: {}", ranks(&l.failed));
    check!(l.new.is_empty(), "local view new: {}", ranks(&l.new));
    if c.job().num_nodes == 1 {
        println!("RESULT view1={}", ranks(&v1.failed));
        return e2s(c.finalize(), "finalize");
    }
    let survivors = [0, 1, 2, 4].map(|r| p(&c, r));
    let fence = FenceOpts {
        collect: false,
        timeout_ms: Some(60_000),
        ft_collective: false,
    };
    e2s(c.fence(&survivors, fence), "fence")?;
    let lost_node = c.job().node_of(&p(&c, 4)).ok_or("rank 4 has no node")?;
    if me == 4 {
        // SAFETY: getppid has no preconditions; kill(2) on this rank's own server.
        unsafe { libc::kill(libc::getppid(), libc::SIGKILL) };
        std::thread::sleep(Duration::from_secs(60));
        return Err("outlived its node server".into());
    }
    let mut tries = 0;
    let v2 = loop {
        tries += 1;
        match c.group_failed_global(ID, timeout) {
            Err(CohortError::PeerLost { node, .. }) if node == lost_node && tries < 20 => {}
            other => break e2s(other, "global view 2")?,
        }
    };
    eprintln!("rank {me}: the second global view took {tries} call(s)");
    let expected = vec![p(&c, 4), p(&c, 5)];
    check!(v2.failed == expected, "view 2: {}", ranks(&v2.failed));
    check!(v2.new == vec![p(&c, 4)], "view 2 new: {}", ranks(&v2.new));
    println!(
        "RESULT view1={} view2={}",
        ranks(&v1.failed),
        ranks(&v2.failed)
    );
    e2s(c.finalize(), "finalize")
}

/// Polling is bounded: a call blocked on its node server polls for its spin budget
/// (COHORT_SPIN_US), as do its background reader and event thread after an exchange,
/// a rank waiting in a node-local fence, and a node server (`cohortd --spin-us`) after
/// each input; then all sleep. Rank 0 waits about 2 s twice — in a whole-job fence
/// (shared memory on one node) and in a group construct (at the node server) — that
/// rank 1 joins late; neither rank 0 nor its node server (our parent) may spend more
/// than a quarter of a wait on a CPU. Prints `IDLE-CPU` with the figures.
fn idle_cpu() -> R {
    const WAIT: Duration = Duration::from_secs(2);
    const MAX_MS: u64 = 500;
    let c = init()?;
    // A handler makes the event thread poll after exchanges too: it must stop as well.
    c.register_event_handler(None, |_, _| {});
    let collect = FenceOpts {
        collect: false,
        timeout_ms: Some(60_000),
        ft_collective: false,
    };
    let both = all(&c);
    let construct = |c: &Client| {
        c.group_construct(
            "idle-cpu",
            &both,
            ConstructOpts {
                timeout_ms: Some(60_000),
                ..Default::default()
            },
        )
        .map(drop)
    };
    // Both ranks connected and the job settled before the measured waits.
    e2s(c.fence(&[], collect.clone()), "first fence")?;
    if c.rank() != 0 {
        std::thread::sleep(WAIT);
        e2s(c.fence(&[], collect), "late fence")?;
        std::thread::sleep(WAIT);
        return e2s(construct(&c), "late construct");
    }
    // SAFETY: getppid has no preconditions.
    let server = unsafe { libc::getppid() };
    type Wait<'a> = Box<dyn Fn() -> Result<(), CohortError> + 'a>;
    let mut waits: Vec<(&str, Wait<'_>)> = vec![
        (
            "whole-job fence",
            Box::new(|| c.fence(&[], collect.clone())),
        ),
        ("group construct", Box::new(|| construct(&c))),
    ];
    for (what, wait) in waits.drain(..) {
        let rank_before = own_cpu_ms();
        let server_before = proc_cpu_ms(server)?;
        let t = std::time::Instant::now();
        e2s(wait(), what)?;
        let waited = t.elapsed();
        let rank_ms = own_cpu_ms() - rank_before;
        let server_ms = proc_cpu_ms(server)? - server_before;
        println!(
            "IDLE-CPU {what}: rank {rank_ms} ms, node server {server_ms} ms of CPU over a {} ms wait",
            waited.as_millis()
        );
        check!(
            waited >= WAIT / 2,
            "the {what} returned after {waited:?}, before the late rank could have joined"
        );
        check!(
            rank_ms <= MAX_MS,
            "rank 0 used {rank_ms} ms of CPU while blocked in a {what} for {waited:?}: its polling is not bounded"
        );
        check!(
            server_ms <= MAX_MS,
            "the node server (pid {server}) used {server_ms} ms of CPU while rank 0 waited in a {what} for {waited:?}: its polling is not bounded"
        );
    }
    Ok(())
}

/// This process's user + system CPU time, in milliseconds.
fn own_cpu_ms() -> u64 {
    // SAFETY: an all-zero rusage is valid, and getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
    ms(u.ru_utime) + ms(u.ru_stime)
}

/// Another process's user + system CPU time (all its threads), in milliseconds, from
/// /proc/PID/stat (fields 14 and 15, in clock ticks).
/// Prints `FD-LIMITS rank=SOFT server=SOFT hard=HARD`: this rank's open-file soft
/// limit, its node server's (our parent's, from /proc) and the hard limit.
fn fd_limits() -> R {
    let _c = init()?;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: getppid has no preconditions.
    let server = unsafe { libc::getppid() };
    let limits = std::fs::read_to_string(format!("/proc/{server}/limits"))
        .map_err(|e| format!("reading /proc/{server}/limits: {e}"))?;
    let server_soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .ok_or_else(|| format!("no open-file limit in /proc/{server}/limits"))?;
    println!(
        "FD-LIMITS rank={} server={server_soft} hard={}",
        lim.rlim_cur, lim.rlim_max
    );
    Ok(())
}

fn proc_cpu_ms(pid: libc::pid_t) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("reading /proc/{pid}/stat: {e}"))?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("/proc/{pid}/stat has no command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3, so fields 14 and 15 are at 11 and 12.
    let tick = |i: usize| -> Result<u64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(|| format!("/proc/{pid}/stat: no field {}", i + 3))
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok((tick(11)? + tick(12)?) * 1000 / hz)
}

/// PMIx_Spawn (the standard's "Process Management" chapter). Run with 2 ranks or
/// more on several node servers. Rank 0 spawns 3 processes of `testprog spawn-child`
/// (block-wise over the node servers) after a spawn on a host no node server runs on
/// was refused naming it; the other ranks learn the new namespace by a fence. Then
/// parents and children construct one group over both namespaces (wildcards), with a
/// context id: every member sees all n + 3 of them, and each side reads the other's
/// remote-scope data without a fence. `cohort run` returns once the children ended too.
fn spawn() -> R {
    use cohort::{SpawnApp, SpawnOpts};
    let c = init()?;
    let (me, n) = (c.rank(), c.size());
    check!(n >= 2, "run with 2 ranks or more, not {n}");
    check!(
        e2s(c.parent(), "parent")?.is_none(),
        "a launched job has no parent"
    );
    let ends = event_channel(&c, &[codes::JOB_END]);
    e2s(c.put(Scope::Remote, "side", format!("parent-{me}")), "put")?;
    if me == 0 {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let app = SpawnApp {
            command: vec![exe.display().to_string(), "spawn-child".into()],
            maxprocs: 3,
            env: vec![("SPAWN_TEST_WORD".into(), "hello".into())],
            cwd: Some("/".into()),
            pset: None,
        };
        let nowhere = SpawnOpts {
            hosts: vec!["no-such-host".into()],
            ..SpawnOpts::default()
        };
        match c.spawn(vec![app.clone()], nowhere) {
            Err(CohortError::BadRequest(m)) if m.contains("no-such-host") => {}
            other => return Err(format!("a spawn on an unknown host: {other:?}")),
        }
        let told = SpawnOpts {
            notify_completion: true,
            ..SpawnOpts::default()
        };
        let ns = e2s(c.spawn(vec![app], told), "spawn")?;
        check!(
            ns.as_str() == format!("{}@1", c.nspace()),
            "the first spawn's namespace is {ns}"
        );
        e2s(
            c.put(Scope::Remote, "child-ns", ns.to_string()),
            "put child-ns",
        )?;
    }
    e2s(c.commit(), "commit")?;
    let collect = FenceOpts {
        collect: true,
        ..FenceOpts::default()
    };
    e2s(c.fence(&[], collect), "fence")?;
    let ns = match e2s(c.get(&p(&c, 0), "child-ns", None), "get child-ns")? {
        Value::Str(s) => s,
        other => return Err(format!("child-ns is {other:?}")),
    };
    let family = [ProcId::wildcard(c.nspace()), ProcId::wildcard(ns.as_str())];
    let g = e2s(c.group_construct("family", &family, ctx()), "construct")?;
    check!(
        g.members.len() == n as usize + 3,
        "{} members",
        g.members.len()
    );
    let cid = g.context_id.ok_or("no context id")?;
    let child = ProcId::new(ns.as_str(), 2);
    let side = e2s(c.get(&child, "side", None), "get a child's data")?;
    check!(
        side == Value::Str("child-2".into()),
        "child 2 posted {side:?}"
    );
    println!("RESULT spawn parent {me} ctx {cid}");
    e2s(c.group_destruct("family", None), "destruct")?;
    if me == 0 {
        // PMIX_NOTIFY_COMPLETION: told once the children all ended.
        let ev = next_event(&ends, "JOB_END")?;
        let code = cohort::info_get(&ev.info, cohort::keys::EXIT_CODE);
        check!(
            ev.affected == [ProcId::wildcard(ns.as_str())] && code == Some(&Value::I64(0)),
            "JOB_END: {ev:?}"
        );
    } else {
        check!(
            ends.try_recv().is_err(),
            "rank {me} did not spawn, yet got JOB_END"
        );
    }
    e2s(c.finalize(), "finalize")
}

/// The spawned side of `spawn`: checks what a spawned process knows (its parent,
/// its job, the spawn's environment and working directory), fences its own job, and
/// joins the parents' group.
fn spawn_child() -> R {
    let c = init()?;
    let (me, n) = (c.rank(), c.size());
    check!(n == 3, "the spawned job has {n} processes");
    let parent = e2s(c.parent(), "parent")?.ok_or("no parent")?;
    check!(parent.rank == 0, "spawned by {parent}");
    check!(
        c.nspace() == format!("{}@1", parent.nspace).as_str(),
        "namespace {} for a spawn of {parent}",
        c.nspace()
    );
    let spawned = e2s(c.get(&p(&c, me), "pmix.spawned", None), "get pmix.spawned")?;
    check!(spawned == Value::Bool(true), "pmix.spawned is {spawned:?}");
    let word = std::env::var("SPAWN_TEST_WORD").unwrap_or_default();
    check!(word == "hello", "SPAWN_TEST_WORD is {word:?}");
    let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
    check!(
        cwd == std::path::Path::new("/"),
        "working directory {cwd:?}"
    );
    e2s(c.put(Scope::Remote, "side", format!("child-{me}")), "put")?;
    e2s(c.commit(), "commit")?;
    e2s(
        c.fence(&[], FenceOpts::default()),
        "fence of the spawned job",
    )?;
    let family = [
        ProcId::wildcard(parent.nspace.as_str()),
        ProcId::wildcard(c.nspace()),
    ];
    let g = e2s(c.group_construct("family", &family, ctx()), "construct")?;
    let parents = g
        .members
        .iter()
        .filter(|m| m.nspace == parent.nspace)
        .count();
    check!(parents + 3 == g.members.len(), "members {:?}", g.members);
    let cid = g.context_id.ok_or("no context id")?;
    let side = e2s(c.get(&parent, "side", None), "get the parent's data")?;
    check!(
        side == Value::Str("parent-0".into()),
        "parent posted {side:?}"
    );
    println!("RESULT spawn child {me} ctx {cid}");
    e2s(c.group_destruct("family", None), "destruct")?;
    e2s(c.finalize(), "finalize")
}

/// Rank 0 spawns `SPAWN_CMD` (split at spaces; 2 processes, one per node server in
/// turn), prints the new namespace, then every rank waits (at most 60 s) for a key
/// nobody publishes: the session must end because of the spawned job, as `cohort run`
/// ends a job whose process fails.
fn spawn_wait() -> R {
    use cohort::{DataRange, LookupOpts, SpawnApp, SpawnMapping, SpawnOpts};
    let c = init()?;
    let cmd = std::env::var("SPAWN_CMD").map_err(|_| "SPAWN_CMD is not set")?;
    if c.rank() == 0 {
        let app = SpawnApp {
            command: cmd.split(' ').map(String::from).collect(),
            maxprocs: 2,
            env: Vec::new(),
            cwd: None,
            pset: None,
        };
        let opts = SpawnOpts {
            mapping: SpawnMapping::RoundRobin,
            ..SpawnOpts::default()
        };
        let ns = e2s(c.spawn(vec![app], opts), "spawn")?;
        println!("RESULT spawned {ns}");
    }
    let opts = LookupOpts {
        range: DataRange::Session,
        wait: Some(0),
        timeout_ms: Some(60_000),
    };
    e2s(c.lookup(&["never-published"], opts), "lookup")?;
    Err("the session outlived its failed spawned job".into())
}

/// Run with one rank per node server on 3 node servers and `--enable-recovery`: rank 0
/// spawns 3 processes of this scenario, one per node server; node server 2 is then
/// killed (SIGKILL) with its two processes, a launched one and a spawned one. Every
/// survivor of either job constructs a group over both jobs (optional): partial
/// success, and the failed members are exactly the two processes of the lost server.
fn spawn_loss() -> R {
    use cohort::{SpawnApp, SpawnMapping, SpawnOpts};
    let c = init()?;
    let me = c.rank();
    let parent = e2s(c.parent(), "parent")?;
    let publish = |key: &str, v: Value| publish_app(&c, key, v);
    let wait_for = |keys: &[&str]| wait_published(&c, keys);
    let launched = match &parent {
        Some(p) => p.nspace.to_string(),
        None => c.nspace().to_string(),
    };
    if parent.is_none() && me == 0 {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let app = SpawnApp {
            command: vec![exe.display().to_string(), "spawn-loss".into()],
            maxprocs: 3,
            env: Vec::new(),
            cwd: None,
            pset: None,
        };
        let opts = SpawnOpts {
            mapping: SpawnMapping::RoundRobin,
            ..SpawnOpts::default()
        };
        let ns = e2s(c.spawn(vec![app], opts), "spawn")?;
        publish("child-ns", Value::Str(ns.to_string()))?;
    }
    if parent.is_some() {
        publish(&format!("ready-c{me}"), Value::Bool(true))?;
    }
    if me == 2 {
        if parent.is_none() {
            // SAFETY: getppid has no preconditions; the parent is this rank's server.
            let server = unsafe { libc::getppid() };
            publish("victim-pid", Value::U32(server as u32))?;
        }
        std::thread::sleep(Duration::from_secs(60));
        return Err("outlived its node server".into());
    }
    let found = wait_for(&["child-ns", "victim-pid", "ready-c0", "ready-c1", "ready-c2"])?;
    let value = |key: &str| found.iter().find(|f| f.key == key).map(|f| f.value.clone());
    let Some(Value::Str(child_ns)) = value("child-ns") else {
        return Err(format!("child-ns: {found:?}"));
    };
    if parent.is_none() && me == 1 {
        let Some(Value::U32(pid)) = value("victim-pid") else {
            return Err(format!("victim-pid: {found:?}"));
        };
        // SAFETY: kill(2) on node server 2 of this session.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        publish("killed", Value::Bool(true))?;
    }
    wait_for(&["killed"])?;
    // A group whose root is not the lost server.
    let gid = (0..)
        .map(|i| format!("spawn-loss-{i}"))
        .find(|id| cohort_topology::rendezvous(id, 3) != 2)
        .expect("some id");
    let both = [
        ProcId::wildcard(launched.as_str()),
        ProcId::wildcard(child_ns.as_str()),
    ];
    let opts = ConstructOpts {
        optional: true,
        ..ctx()
    };
    let g = e2s(c.group_construct(&gid, &both, opts), "construct")?;
    let lost = [
        ProcId::new(launched.as_str(), 2),
        ProcId::new(child_ns.as_str(), 2),
    ];
    check!(
        g.status == ConstructStatus::PartialSuccess && g.failed == lost && g.members.len() == 4,
        "construct after the loss: {:?}, members {:?}, failed {:?}",
        g.status,
        g.members,
        g.failed
    );
    println!("RESULT spawn-loss: 4 members, the lost server's two processes failed");
    Ok(())
}

/// Rank 0 spawns `SPAWN_NP` (default 1) processes of `SPAWN_CMD` (split at spaces),
/// asking to be told when they end, and waits for that `JOB_END` event: the
/// spawned job must exit 0. The other ranks just finalize.
fn spawn_run() -> R {
    use cohort::{SpawnApp, SpawnOpts};
    let c = init()?;
    if c.rank() == 0 {
        let cmd = std::env::var("SPAWN_CMD").map_err(|_| "SPAWN_CMD is not set")?;
        let np = std::env::var("SPAWN_NP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let ends = event_channel(&c, &[codes::JOB_END]);
        let app = SpawnApp {
            command: cmd.split(' ').map(String::from).collect(),
            maxprocs: np,
            env: Vec::new(),
            cwd: None,
            pset: None,
        };
        let opts = SpawnOpts {
            notify_completion: true,
            ..SpawnOpts::default()
        };
        let ns = e2s(c.spawn(vec![app], opts), "spawn")?;
        let ev = next_event(&ends, "JOB_END")?;
        let code = cohort::info_get(&ev.info, cohort::keys::EXIT_CODE);
        check!(code == Some(&Value::I64(0)), "{ns} ended with {code:?}");
        println!("RESULT spawn-run {ns} ended");
    }
    e2s(c.finalize(), "finalize")
}

/// A spawn with a timeout while node server 2 is frozen (SIGSTOP, by rank 1; run
/// with the failure detector off, 3 node servers, 3 ranks): it fails with a timeout
/// naming that server and the processes not started, and its job is cancelled. Once
/// the server runs again, a spawn without a timeout starts the next job (`@2`) on all
/// three; its processes print a line and exit. Rank 2 (on the frozen server) waits.
fn spawn_timeout() -> R {
    use cohort::{SpawnApp, SpawnMapping, SpawnOpts};
    let c = init()?;
    let me = c.rank();
    if let Some(parent) = e2s(c.parent(), "parent")? {
        println!(
            "RESULT spawn-timeout child {me} of {} (parent {parent})",
            c.nspace()
        );
        return e2s(c.finalize(), "finalize");
    }
    let publish = |key: &str, v: Value| publish_app(&c, key, v);
    let wait_for = |keys: &[&str]| wait_published(&c, keys);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let app = SpawnApp {
        command: vec![exe.display().to_string(), "spawn-timeout".into()],
        maxprocs: 3,
        env: Vec::new(),
        cwd: None,
        pset: None,
    };
    match me {
        2 => {
            // SAFETY: getppid has no preconditions; the parent is this rank's server.
            let server = unsafe { libc::getppid() };
            publish("victim-pid", Value::U32(server as u32))?;
        }
        1 => {
            let found = wait_for(&["victim-pid"])?;
            let Some(Value::U32(pid)) = found.first().map(|f| f.value.clone()) else {
                return Err(format!("victim-pid: {found:?}"));
            };
            // SAFETY: kill(2) on node server 2 of this session.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
            publish("frozen", Value::Bool(true))?;
            wait_for(&["timed-out"])?;
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
            publish("thawed", Value::Bool(true))?;
        }
        _ => {
            wait_for(&["frozen"])?;
            let opts = SpawnOpts {
                mapping: SpawnMapping::RoundRobin,
                timeout_ms: Some(2_000),
                ..SpawnOpts::default()
            };
            match c.spawn(vec![app.clone()], opts) {
                Err(e @ CohortError::Timeout { .. }) => {
                    println!("RESULT spawn-timeout timed out: {e}")
                }
                other => return Err(format!("a spawn with node2 frozen: {other:?}")),
            }
            publish("timed-out", Value::Bool(true))?;
            wait_for(&["thawed"])?;
            let opts = SpawnOpts {
                mapping: SpawnMapping::RoundRobin,
                ..SpawnOpts::default()
            };
            let ns = e2s(c.spawn(vec![app], opts), "spawn after the thaw")?;
            println!("RESULT spawn-timeout then spawned {ns}");
            publish("done", Value::Bool(true))?;
        }
    }
    wait_for(&["done"])?;
    e2s(c.finalize(), "finalize")
}

/// A spawn cancelled while it starts (run on 3 node servers, 3 ranks, with node server
/// 2 holding `StartJob` longer than the spawn's 4 s limit: COHORT_TEST_HOLD_START_JOB,
/// debug builds). Rank 0 spawns 3 processes, one per node server; those of node
/// servers 0 and 1 start, write their pid into a file of SPAWN_PID_DIR and sleep. The
/// spawn times out naming node server 2, and the processes that started must die
/// (the cancel kills them) rather than sleep on: rank 0 waits until at least the two
/// started ones have written their pid and every pid written is gone.
fn spawn_cancel_start() -> R {
    use cohort::{SpawnApp, SpawnMapping, SpawnOpts};
    let c = init()?;
    if e2s(c.parent(), "parent")?.is_some() {
        let dir = std::env::var("SPAWN_PID_DIR").map_err(|_| "SPAWN_PID_DIR is not set")?;
        let file = std::path::Path::new(&dir).join(c.rank().to_string());
        std::fs::write(&file, std::process::id().to_string()).map_err(|e| e.to_string())?;
        // Only the cancel ends this early.
        std::thread::sleep(Duration::from_secs(120));
        return e2s(c.finalize(), "finalize");
    }
    if c.rank() == 0 {
        let dir = std::env::temp_dir().join(format!("cohort-cancel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let app = SpawnApp {
            command: vec![exe.display().to_string(), "spawn-cancel-start".into()],
            maxprocs: 3,
            env: vec![("SPAWN_PID_DIR".into(), dir.display().to_string())],
            cwd: None,
            pset: None,
        };
        let opts = SpawnOpts {
            mapping: SpawnMapping::RoundRobin,
            timeout_ms: Some(4_000),
            ..SpawnOpts::default()
        };
        match c.spawn(vec![app], opts) {
            Err(e @ CohortError::Timeout { .. }) => println!("RESULT spawn-cancel timed out: {e}"),
            other => return Err(format!("a spawn with node2 holding StartJob: {other:?}")),
        }
        // Generous: within the harness's own deadline, so that a failure says why.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let (written, alive) = loop {
            let mut pids = Vec::new();
            for entry in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
                let path = entry.map_err(|e| e.to_string())?.path();
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                if let Ok(pid) = text.trim().parse::<i32>() {
                    pids.push(pid);
                }
            }
            // SAFETY: kill(2) with signal 0 only checks that the process exists.
            let alive: Vec<i32> = pids
                .iter()
                .copied()
                .filter(|&p| unsafe { libc::kill(p, 0) } == 0)
                .collect();
            if (pids.len() >= 2 && alive.is_empty()) || std::time::Instant::now() > deadline {
                break (pids.len(), alive);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = std::fs::remove_dir_all(&dir);
        println!(
            "RESULT spawn-cancel started {} still alive {alive:?}",
            written.min(2)
        );
    }
    e2s(c.finalize(), "finalize")
}

/// Spawned processes are bound like the launched job, on the cores left (run with 1
/// rank and `--bind-to core` on 1 node server): rank 0 spawns 1 process and waits for
/// its end (JOB_END), spawns 1 again (on the core the first one freed) and waits, then
/// spawns as many as the host has cores (the universe size), which no longer fit. Every process
/// prints its `COHORT_BINDING`, its kernel affinity (`Cpus_allowed_list`) and its
/// PMIX_CPUSET as its node server has it (`none`: not found); the parent also prints
/// its first child's.
fn spawn_bind() -> R {
    use cohort::{SpawnApp, SpawnOpts};
    let c = init()?;
    let cpuset = |p: &ProcId| match c.get(p, cohort::keys::CPUSET, None) {
        Ok(Value::Str(s)) => Ok(s),
        Err(CohortError::NotFound { .. }) => Ok("none".to_string()),
        other => Err(format!("the cpuset of {p}: {other:?}")),
    };
    let mine = cpuset(c.proc_id())?;
    let binding = std::env::var("COHORT_BINDING").unwrap_or_default();
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(str::trim)
        .ok_or("no Cpus_allowed_list")?
        .to_string();
    if e2s(c.parent(), "parent")?.is_some() {
        println!(
            "RESULT spawn-bind child {} of {} binding {binding} allowed {allowed} cpuset {mine}",
            c.rank(),
            c.nspace()
        );
        return e2s(c.finalize(), "finalize");
    }
    let cores = c.universe_size();
    println!(
        "RESULT spawn-bind parent binding {binding} allowed {allowed} cores {cores} cpuset {mine}"
    );
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let ends = event_channel(&c, &[codes::JOB_END]);
    let app = |n: u32| SpawnApp {
        command: vec![exe.display().to_string(), "spawn-bind".into()],
        maxprocs: n,
        env: Vec::new(),
        cwd: None,
        pset: None,
    };
    // Processes, cores per process and binding: one, the same again once it ended,
    // one of two cores (PMIX_CPUS_PER_PROC), one bound to none (PMIX_BINDTO), as many
    // as the host has cores.
    let spawns = [
        (1, 0, None),
        (1, 0, None),
        (1, 2, None),
        (1, 0, Some("none")),
    ];
    for (i, (n, cpus, bind)) in spawns.into_iter().enumerate() {
        let opts = SpawnOpts {
            notify_completion: true,
            cpus_per_proc: cpus,
            bind_to: bind.map(str::to_string),
            ..SpawnOpts::default()
        };
        let ns = e2s(c.spawn(vec![app(n)], opts), "spawn")?;
        if i == 0 {
            let child = cpuset(&ProcId::new(ns.as_str(), 0))?;
            println!("RESULT spawn-bind parent sees its first child's cpuset {child}");
        }
        // Its process ended: its cores are free for the next spawn.
        next_event(&ends, "JOB_END")?;
    }
    // A binding that is none of the words is refused.
    let sideways = SpawnOpts {
        bind_to: Some("sideways".into()),
        ..SpawnOpts::default()
    };
    match c.spawn(vec![app(1)], sideways) {
        Err(CohortError::BadRequest(why)) if why.contains("sideways") => {
            println!("RESULT spawn-bind binding sideways refused")
        }
        other => return Err(format!("a spawn bound sideways: {other:?}")),
    }
    e2s(c.spawn(vec![app(cores)], SpawnOpts::default()), "spawn")?;
    e2s(c.finalize(), "finalize")
}

/// Process sets of spawned jobs (PMIx "Process Sets": the host defines and deletes
/// sets at run time and tells every process). Run with `--pset launched=0,1,2` on 3
/// ranks. Rank 0 spawns 3 processes, the first 2 forming set "workers"; every parent
/// gets PROCESS_SET_DEFINE naming the set and its members, sees it (and the child's
/// namespace) in its queries while the children run, gets PROCESS_SET_DELETE once
/// they ended, and no longer sees it. A set name in use or naming a job is refused;
/// once the set is deleted its name can be given again.
fn spawn_pset() -> R {
    use cohort::{SpawnApp, SpawnOpts};
    let c = init()?;
    let me = c.rank();
    let own = c.nspace().to_string();
    let names = |c: &Client| e2s(c.pset_names(), "pset names");
    let nspaces = |c: &Client| -> Result<Vec<String>, String> {
        let n = e2s(c.namespaces(), "namespaces")?;
        Ok(n.iter().map(|n| n.to_string()).collect())
    };
    if let Some(parent) = e2s(c.parent(), "parent")? {
        // A child: app 0's two processes are in "workers", app 1's is in none.
        let mine = e2s(c.psets_of(&p(&c, me)), "psets of self")?;
        let want: &[&str] = if me < 2 { &["workers"] } else { &[] };
        check!(mine == want, "child {me} is in sets {mine:?}");
        check!(
            names(&c)? == ["launched", "workers"],
            "child {me} sees sets {:?}",
            names(&c)?
        );
        let n = nspaces(&c)?;
        check!(
            n == [parent.nspace.to_string(), own.clone()],
            "child {me} sees namespaces {n:?}"
        );
        if std::env::var("SPAWN_PSET_AGAIN").is_ok() {
            println!("RESULT spawn-pset child {me} of the second spawn");
            return e2s(c.finalize(), "finalize");
        }
        let family = [
            ProcId::wildcard(parent.nspace.as_str()),
            ProcId::wildcard(own.as_str()),
        ];
        e2s(
            c.group_construct("pset-family", &family, ConstructOpts::default()),
            "construct",
        )?;
        e2s(c.group_destruct("pset-family", None), "destruct")?;
        println!("RESULT spawn-pset child {me}");
        return e2s(c.finalize(), "finalize");
    }
    let sets = event_channel(&c, &[codes::PROCESS_SET_DEFINE, codes::PROCESS_SET_DELETE]);
    check!(
        names(&c)? == ["launched"],
        "sets at start: {:?}",
        names(&c)?
    );
    let count = e2s(c.pset_count(), "pset count")?;
    check!(count == 1, "{count} sets at start");
    check!(nspaces(&c)? == [own.clone()], "namespaces at start");
    // Every parent looked before rank 0 spawns.
    e2s(c.fence(&[], FenceOpts::default()), "fence before the spawn")?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let app = |n: u32, pset: Option<&str>| SpawnApp {
        command: vec![exe.display().to_string(), "spawn-pset".into()],
        maxprocs: n,
        env: Vec::new(),
        cwd: None,
        pset: pset.map(str::to_string),
    };
    if me == 0 {
        for (bad, why) in [("launched", "defined already"), (own.as_str(), "namespace")] {
            match c.spawn(vec![app(1, Some(bad))], SpawnOpts::default()) {
                Err(CohortError::BadRequest(m)) if m.contains(bad) && m.contains(why) => {}
                other => return Err(format!("a spawn defining set {bad:?}: {other:?}")),
            }
        }
        let ns = e2s(
            c.spawn(
                vec![app(2, Some("workers")), app(1, None)],
                SpawnOpts::default(),
            ),
            "spawn",
        )?;
        e2s(c.put(Scope::Remote, "child-ns", ns.to_string()), "put")?;
    }
    e2s(c.commit(), "commit")?;
    let collect = FenceOpts {
        collect: true,
        ..FenceOpts::default()
    };
    e2s(c.fence(&[], collect.clone()), "fence")?;
    let ns = match e2s(c.get(&p(&c, 0), "child-ns", None), "get child-ns")? {
        Value::Str(s) => s,
        other => return Err(format!("child-ns is {other:?}")),
    };
    let workers = vec![ProcId::new(ns.as_str(), 0), ProcId::new(ns.as_str(), 1)];
    // Every node server started its share before the spawn returned: the set is
    // defined everywhere, and this process was told.
    let ev = next_event(&sets, "PROCESS_SET_DEFINE")?;
    let name = cohort::info_get(&ev.info, cohort::keys::PSET_NAME);
    let members = cohort::info_get(&ev.info, cohort::keys::PSET_MEMBERS);
    check!(
        ev.code == codes::PROCESS_SET_DEFINE
            && name == Some(&Value::Str("workers".into()))
            && members == Some(&Value::Procs(workers.clone())),
        "parent {me} was told {ev:?}"
    );
    check!(
        names(&c)? == ["launched", "workers"],
        "parent {me} sees sets {:?} while the children run",
        names(&c)?
    );
    check!(e2s(c.pset_count(), "pset count")? == 2, "two sets");
    let m = e2s(c.pset_members("workers"), "members of workers")?;
    check!(m == workers, "workers are {m:?}");
    check!(
        nspaces(&c)? == [own.clone(), ns.clone()],
        "parent {me} sees namespaces {:?}",
        nspaces(&c)?
    );
    let family = [
        ProcId::wildcard(own.as_str()),
        ProcId::wildcard(ns.as_str()),
    ];
    e2s(
        c.group_construct("pset-family", &family, ConstructOpts::default()),
        "construct",
    )?;
    e2s(c.group_destruct("pset-family", None), "destruct")?;
    // The children end: the set is deleted, its namespace no longer active.
    let ev = next_event(&sets, "PROCESS_SET_DELETE")?;
    let name = cohort::info_get(&ev.info, cohort::keys::PSET_NAME);
    check!(
        ev.code == codes::PROCESS_SET_DELETE && name == Some(&Value::Str("workers".into())),
        "parent {me} was told {ev:?} after the children ended"
    );
    check!(
        names(&c)? == ["launched"],
        "sets after the end: {:?}",
        names(&c)?
    );
    check!(nspaces(&c)? == [own.clone()], "namespaces after the end");
    match c.pset_members("workers") {
        Err(CohortError::PsetNotFound { name }) if name == "workers" => {}
        other => return Err(format!("members of a deleted set: {other:?}")),
    }
    println!(
        "RESULT spawn-pset parent {me} told of workers {}",
        ranks(&workers)
    );
    // The name is free again (the children only check and leave).
    e2s(
        c.fence(&[], FenceOpts::default()),
        "fence before the second spawn",
    )?;
    if me == 0 {
        let mut apps = vec![app(2, Some("workers")), app(1, None)];
        for a in &mut apps {
            a.env = vec![("SPAWN_PSET_AGAIN".into(), "1".into())];
        }
        let again = e2s(c.spawn(apps, SpawnOpts::default()), "spawn again")?;
        check!(
            again.as_str() != ns,
            "the second spawn reused namespace {ns}"
        );
        println!("RESULT spawn-pset parent spawned workers again");
    }
    e2s(c.finalize(), "finalize")
}

/// A spawned job whose processes all die with a lost node server still ends: its
/// process set is deleted (PROCESS_SET_DELETE) at the survivors. Run with 3 ranks on 3
/// node servers and `--enable-recovery`: rank 0 spawns one process, in set "doomed",
/// on node server 2; rank 1 kills that node server (rank 2 and the child die with it);
/// ranks 0 and 1 are told the set is gone.
fn spawn_pset_loss() -> R {
    use cohort::{SpawnApp, SpawnOpts};
    let c = init()?;
    let me = c.rank();
    if e2s(c.parent(), "parent")?.is_some() {
        publish_app(&c, "child-ready", Value::Bool(true))?;
        std::thread::sleep(Duration::from_secs(60));
        return Err("the child outlived its node server".into());
    }
    let sets = event_channel(&c, &[codes::PROCESS_SET_DEFINE, codes::PROCESS_SET_DELETE]);
    if me == 2 {
        // SAFETY: getppid has no preconditions; the parent is this rank's server.
        let server = unsafe { libc::getppid() };
        publish_app(&c, "victim-pid", Value::U32(server as u32))?;
        std::thread::sleep(Duration::from_secs(60));
        return Err("outlived its node server".into());
    }
    if me == 0 {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let app = SpawnApp {
            command: vec![exe.display().to_string(), "spawn-pset-loss".into()],
            maxprocs: 1,
            env: Vec::new(),
            cwd: None,
            pset: Some("doomed".into()),
        };
        let opts = SpawnOpts {
            hosts: vec![c.job().node_names[2].clone()],
            ..SpawnOpts::default()
        };
        e2s(c.spawn(vec![app], opts), "spawn")?;
    }
    let found = wait_published(&c, &["victim-pid", "child-ready"])?;
    let ev = next_event(&sets, "PROCESS_SET_DEFINE")?;
    check!(
        ev.code == codes::PROCESS_SET_DEFINE,
        "rank {me} was told {ev:?} first"
    );
    if me == 1 {
        let Some(Value::U32(pid)) = found
            .iter()
            .find(|f| f.key == "victim-pid")
            .map(|f| f.value.clone())
        else {
            return Err(format!("victim-pid: {found:?}"));
        };
        // SAFETY: kill(2) on node server 2 of this session.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    let ev = next_event(&sets, "PROCESS_SET_DELETE")?;
    let name = cohort::info_get(&ev.info, cohort::keys::PSET_NAME);
    check!(
        ev.code == codes::PROCESS_SET_DELETE && name == Some(&Value::Str("doomed".into())),
        "rank {me} was told {ev:?}"
    );
    let names = e2s(c.pset_names(), "pset names")?;
    check!(names.is_empty(), "sets after the loss: {names:?}");
    println!("RESULT spawn-pset-loss deleted");
    e2s(c.finalize(), "finalize")
}

/// Run with 1 rank in a directory holding `prog` and `sub/prog`, links to this program
/// (`cohort run --wdir`): rank 0 spawns `./prog spawn-cwd` twice, one application without a working
/// directory and one with the relative `sub`. As OpenPMIx's PMIx_Spawn, the first
/// runs in the parent's directory and the second in its `sub` (each finding `./prog`
/// there); each child checks its directory against SPAWN_EXPECT_CWD.
fn spawn_cwd() -> R {
    use cohort::{SpawnApp, SpawnOpts};
    let c = init()?;
    let here = std::env::current_dir().map_err(|e| e.to_string())?;
    if e2s(c.parent(), "parent")?.is_some() {
        let want = std::env::var("SPAWN_EXPECT_CWD").map_err(|e| e.to_string())?;
        check!(
            here == std::path::Path::new(&want),
            "child {} runs in {here:?}, not {want:?}",
            c.nspace()
        );
        println!("RESULT spawn-cwd child {}", here.display());
        return e2s(c.finalize(), "finalize");
    }
    check!(c.size() == 1, "run with 1 rank, not {}", c.size());
    let ends = event_channel(&c, &[codes::JOB_END]);
    let app = |cwd: Option<&str>, expect: std::path::PathBuf| SpawnApp {
        command: vec!["./prog".into(), "spawn-cwd".into()],
        maxprocs: 1,
        env: vec![("SPAWN_EXPECT_CWD".into(), expect.display().to_string())],
        cwd: cwd.map(String::from),
        pset: None,
    };
    let told = SpawnOpts {
        notify_completion: true,
        ..SpawnOpts::default()
    };
    for (cwd, expect) in [(None, here.clone()), (Some("sub"), here.join("sub"))] {
        let ns = e2s(c.spawn(vec![app(cwd, expect)], told.clone()), "spawn")?;
        let ev = next_event(&ends, "JOB_END")?;
        let code = cohort::info_get(&ev.info, cohort::keys::EXIT_CODE);
        check!(
            ev.affected == [ProcId::wildcard(ns.as_str())] && code == Some(&Value::I64(0)),
            "the child in {cwd:?} ended with {ev:?}"
        );
    }
    println!("RESULT spawn-cwd parent {}", here.display());
    e2s(c.finalize(), "finalize")
}

/// Publishes `key` = `v` in the session, application-persistent.
fn publish_app(c: &Client, key: &str, v: Value) -> R {
    use cohort::{DataRange, Persistence};
    let what = format!("publish {key}");
    e2s(
        c.publish(vec![(key.into(), v)], DataRange::Session, Persistence::App),
        &what,
    )
}

/// Looks `keys` up, waiting (at most 60 s) until every one is published.
fn wait_published(c: &Client, keys: &[&str]) -> Result<Vec<cohort::Published>, String> {
    let opts = cohort::LookupOpts {
        wait: Some(0),
        timeout_ms: Some(60_000),
        ..cohort::LookupOpts::default()
    };
    e2s(c.lookup(keys, opts), "lookup")
}

/// Rank 0 prints the session's universe size (PMIX_UNIV_SIZE), which is never below
/// the job's size, and agrees with the node server's answer for the job's wildcard.
fn universe() -> R {
    let c = init()?;
    let u = c.universe_size();
    check!(
        u >= c.size(),
        "universe {u} below the job's {} ranks",
        c.size()
    );
    let wild = ProcId::wildcard(c.nspace());
    let served = e2s(c.get(&wild, "pmix.univ.size", None), "get pmix.univ.size")?;
    check!(
        served == Value::U32(u),
        "the node server says {served:?}, the welcome {u}"
    );
    if c.rank() == 0 {
        println!("RESULT universe {u}");
    }
    e2s(c.finalize(), "finalize")
}
