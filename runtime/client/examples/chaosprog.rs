//! Rank program of the chaos test (`cluster-tests/tests/chaos.rs`): `chaosprog ITERS`
//! under `cohort run --enable-recovery`, with a plan of failures in
//! `COHORT_CHAOS_PLAN`.
//!
//! Every rank runs `ITERS` rounds. Round `k`: put and commit `chaos-k` (remote scope),
//! construct group `chaos-k` over every rank of the job (optional participation, a
//! context id), read every member's `chaos-k` from what the construct brought, fence
//! over the group (`{chaos-k, *}`, collecting data, fault-tolerant), destruct it
//! (fault-tolerant). A rank that is named in the plan dies while it runs one of those
//! calls. Nothing waits for a rank known to be gone, so every call must return, with a
//! result or with an error naming the loss (`ProcTerminated`, `PeerLost`); the test
//! checks what the ranks print:
//!
//! * `RESULT k construct ok MEMBERS CID`, or `RESULT k construct err KIND`;
//! * `RESULT k fence ok|err KIND`, `RESULT k destruct ok|err KIND` after a construct
//!   that succeeded;
//! * `CHAOS done` once the rounds are over and finalize returned;
//! * `FAIL rank R scenario chaos: …` when a member's data read back wrong.
//!
//! The plan: comma-separated `RANK:ROUND:CALL:WHAT:DELAY_US` — when rank `RANK` starts
//! `CALL` (construct, fence, destruct) of round `ROUND`, a thread of it waits
//! `DELAY_US` µs (the call may end first: the failure lands later) and then does
//! `WHAT`: `kill` (SIGKILL itself), `exit` (`_exit(3)`, no finalize), `server`
//! (SIGKILL its node server, whose death kills its ranks). `CALL` `between`: once the
//! round's last call returned, the rank itself waits and does it.
//!
//! Spec: pmix-standard-sets-and-groups.tex (PMIX_GROUP_OPTIONAL,
//! PMIX_GROUP_FT_COLLECTIVE); group-construction-methods.txt §6.4.3.1.

#[macro_use]
mod support;
use support::*;

use std::time::Duration;

use cohort::{Client, CohortError, ConstructOpts, FenceOpts, ProcId, Scope, Value};

/// Each call's own limit: the failure detector and closed connections report a loss
/// well within it, so reaching it (a `Timeout` line) is what the test calls a hang.
const CALL_TIMEOUT_MS: u64 = 30_000;

#[derive(Clone, Copy, Debug)]
enum Action {
    Kill,
    Exit,
    Server,
}

struct Failure {
    round: u32,
    call: String,
    action: Action,
    delay: Duration,
}

fn main() {
    exit_on_failure("chaos", run());
}

/// This rank's failures from `COHORT_CHAOS_PLAN`.
fn plan_for(me: u32) -> Result<Vec<Failure>, String> {
    let plan = std::env::var("COHORT_CHAOS_PLAN").unwrap_or_default();
    let mut mine = Vec::new();
    for entry in plan.split(',').filter(|e| !e.is_empty()) {
        let f: Vec<&str> = entry.split(':').collect();
        let [rank, round, call, what, delay] = f[..] else {
            return Err(format!(
                "plan entry {entry:?} is not RANK:ROUND:CALL:WHAT:DELAY_US"
            ));
        };
        let num = |s: &str| s.parse::<u64>().map_err(|e| format!("{entry:?}: {e}"));
        if num(rank)? != u64::from(me) {
            continue;
        }
        let action = match what {
            "kill" => Action::Kill,
            "exit" => Action::Exit,
            "server" => Action::Server,
            other => return Err(format!("{entry:?}: unknown failure {other:?}")),
        };
        mine.push(Failure {
            round: num(round)? as u32,
            call: call.to_string(),
            action,
            delay: Duration::from_micros(num(delay)?),
        });
    }
    Ok(mine)
}

/// Starts the failure planned for `call` of `round`, if any. `between` (after the
/// round's last call returned, before the next round) acts at once, in this thread.
fn arm(plan: &[Failure], round: u32, call: &str) {
    for f in plan.iter().filter(|f| f.round == round && f.call == call) {
        let (action, delay) = (f.action, f.delay);
        if call == "between" {
            std::thread::sleep(delay);
            fail_now(action);
            // Killed with its node server, or by itself.
            std::thread::sleep(Duration::from_secs(60));
        } else {
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                fail_now(action);
            });
        }
    }
}

fn fail_now(action: Action) {
    // SAFETY: signals to this process or its parent (its node server), and _exit,
    // which ends the process without running anything of ours.
    unsafe {
        match action {
            Action::Kill => {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            Action::Exit => libc::_exit(3),
            Action::Server => {
                libc::kill(libc::getppid(), libc::SIGKILL);
            }
        }
    }
}

/// The error's variant name (`ProcTerminated`, `PeerLost`, `Timeout`, …).
fn kind(e: &CohortError) -> String {
    let d = format!("{e:?}");
    d.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

/// What a call's line says: `ok`, or `err KIND` (the error itself goes to stderr).
fn outcome<T>(me: u32, r: &Result<T, CohortError>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => {
            eprintln!("chaos: rank {me}: {e}");
            format!("err {}", kind(e))
        }
    }
}

fn value_of(rank: u32, round: u32) -> u32 {
    rank * 1000 + round
}

fn run() -> R {
    let rounds: u32 = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "6".into())
        .parse()
        .map_err(|e| format!("rounds: {e}"))?;
    let c = init()?;
    let me = c.rank();
    let plan = plan_for(me)?;
    let everyone: Vec<ProcId> = (0..c.size()).map(|r| p(&c, r)).collect();
    for k in 0..rounds {
        round(&c, &plan, &everyone, k)?;
    }
    e2s(c.finalize(), "finalize")?;
    println!("CHAOS done rank {me}");
    Ok(())
}

/// Round `k`: group `chaos-k`, whose members post key `chaos-k`.
fn round(c: &Client, plan: &[Failure], everyone: &[ProcId], k: u32) -> R {
    let me = c.rank();
    let gid = format!("chaos-{k}");
    let key = &gid;
    e2s(
        c.put(Scope::Remote, key, Value::U32(value_of(me, k))),
        "put",
    )?;
    e2s(c.commit(), "commit")?;
    arm(plan, k, "construct");
    let opts = ConstructOpts {
        optional: true,
        assign_context_id: true,
        timeout_ms: Some(CALL_TIMEOUT_MS),
        ..Default::default()
    };
    let g = match c.group_construct(&gid, everyone, opts) {
        Ok(g) => g,
        e @ Err(_) => {
            println!("RESULT {k} construct {}", outcome(me, &e));
            arm(plan, k, "between");
            return Ok(());
        }
    };
    let cid = g.context_id.ok_or("no context id")?;
    println!("RESULT {k} construct ok {} {cid}", ranks(&g.members));
    // Every member's data came with the construct, also a member lost since.
    for m in &g.members {
        let v = c.get(m, key, Some(Duration::from_secs(10)));
        check!(
            matches!(v, Ok(Value::U32(x)) if x == value_of(m.rank, k)),
            "round {k}: {key} of member {m}: {v:?}"
        );
    }
    arm(plan, k, "fence");
    let fence = FenceOpts {
        collect: true,
        timeout_ms: Some(CALL_TIMEOUT_MS),
        ft_collective: true,
    };
    let r = c.fence(&[ProcId::wildcard(gid.as_str())], fence);
    println!("RESULT {k} fence {}", outcome(me, &r));
    arm(plan, k, "destruct");
    let r = c.group_destruct_tolerant(&gid, Some(Duration::from_millis(CALL_TIMEOUT_MS)));
    println!("RESULT {k} destruct {}", outcome(me, &r));
    arm(plan, k, "between");
    Ok(())
}
