//! Rank program for the integration tests: `testprog <scenario>`, run under
//! `cohort run`. Each scenario asserts the documented behaviour from inside the ranks
//! and exits non-zero with a message naming the violated expectation; lines starting
//! with `RESULT` are compared across ranks by the tests.
//!
//! Spec references: ../shared/spec/group-construction-methods.txt (§6.4.3.1),
//! pmix-standard-sets-and-groups.tex, rfc0033-pmix-groups.md.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use cohort::{
    codes, Client, CohortError, ConstructOpts, ConstructStatus, Event, FenceOpts, ProcId, Range,
    Scope, Value,
};

type R = Result<(), String>;

macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let result = match scenario.as_str() {
        "construct" => construct(),
        "fence" => fence(),
        "modex" => modex(),
        "addmembers" => addmembers(),
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
        other => Err(format!("unknown scenario {other:?}")),
    };
    if let Err(e) = result {
        let rank = std::env::var("COHORT_RANK").unwrap_or_default();
        eprintln!("FAIL rank {rank} scenario {scenario}: {e}");
        std::process::exit(1);
    }
}

fn init() -> Result<Client, String> {
    Client::init().map_err(|e| format!("init: {e}"))
}

fn all(c: &Client) -> Vec<ProcId> {
    (0..c.size()).map(|r| p(c, r)).collect()
}

fn p(c: &Client, r: u32) -> ProcId {
    ProcId::new(c.nspace(), r)
}

fn ranks(procs: &[ProcId]) -> String {
    procs
        .iter()
        .map(|p| p.rank.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn ctx() -> ConstructOpts {
    ConstructOpts {
        assign_context_id: true,
        timeout_ms: Some(60_000),
        ..Default::default()
    }
}

fn e2s<T>(r: Result<T, CohortError>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Collective method across nodes: leaders list all leaders in different orders; the
/// result is canonical, identical everywhere, and carries group info and posted data
/// readable without a fence, also after destruct.
fn construct() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    e2s(c.put(Scope::Remote, "ep", format!("ep-{me}")), "put")?;
    let mut leaders = all(&c);
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
        g.members == all(&c),
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
    let other = p(&c, (me + 1) % n);
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
    e2s(c.finalize(), "finalize")
}

/// Fence over all (with data), over a subset, and over a group `{g,*}`.
fn fence() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    e2s(c.put(Scope::Global, "payload", vec![me as u8; 1024]), "put")?;
    let collect = FenceOpts {
        collect: true,
        timeout_ms: Some(60_000),
    };
    e2s(c.fence(&[], collect.clone()), "fence all")?;
    for r in 0..n {
        let v = e2s(
            c.get(&p(&c, r), "payload", Some(Duration::from_secs(5))),
            "get",
        )?;
        check!(
            v == Value::Bytes(vec![r as u8; 1024]),
            "payload of rank {r}"
        );
    }
    // subset: even ranks only, twice in a row (sequence numbering)
    let evens: Vec<ProcId> = (0..n).filter(|r| r % 2 == 0).map(|r| p(&c, r)).collect();
    if me % 2 == 0 {
        for _ in 0..2 {
            e2s(c.fence(&evens, FenceOpts::default()), "fence evens")?;
        }
    }
    // group-addressed fence
    let odds: Vec<ProcId> = (0..n).filter(|r| r % 2 == 1).map(|r| p(&c, r)).collect();
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
    e2s(c.finalize(), "finalize")
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
fn addmembers() -> R {
    let c = init()?;
    let me = c.rank();
    let n = c.size();
    let leaders = vec![p(&c, 0), p(&c, n - 1)];
    let g = if me == 0 || me == n - 1 {
        let mut opts = ctx();
        opts.add_members = (1..n - 1)
            .filter(|r| (r % 2 == 0) == (me == 0))
            .map(|r| p(&c, r))
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
    check!(g.members == all(&c), "members {}", ranks(&g.members));
    println!(
        "RESULT members={} ctx={}",
        ranks(&g.members),
        g.context_id.unwrap_or(0)
    );
    e2s(c.group_destruct("adds", None), "destruct")?;
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

fn event_channel(c: &Client, codes: &[i32]) -> crossbeam_channel::Receiver<Event> {
    let (tx, rx) = crossbeam_channel::unbounded();
    c.register_event_handler(Some(codes), move |_, ev| {
        let _ = tx.send(ev.clone());
    });
    rx
}

/// rfc0033: leave → every remaining member gets PMIX_GROUP_LEFT naming the leaver;
/// destruct then completes among the rest.
fn leave() -> R {
    let c = init()?;
    let me = c.rank();
    let rx = event_channel(&c, &[codes::GROUP_LEFT]);
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
