//! Helpers shared by the rank programs of the integration tests (`testprog`,
//! `connectprog`): a scenario returns an error naming the violated expectation, and
//! every wait is bounded so that a hang shows as such an error.

// Each program uses a part of this.
#![allow(dead_code)]

use std::time::Duration;

use cohort::{Client, CohortError, Event, ProcId};

pub type R = Result<(), String>;

/// How long a rank waits for an event before it reports what it was waiting for.
pub const EVENT_WAIT: Duration = Duration::from_secs(25);

/// Fails the scenario with the message unless `$cond` holds.
macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Ends the process with status 1 and a `FAIL rank R scenario S: …` line (which the
/// tests look for) when the scenario failed.
pub fn exit_on_failure(scenario: &str, result: R) {
    if let Err(e) = result {
        let rank = std::env::var("COHORT_RANK").unwrap_or_default();
        eprintln!("FAIL rank {rank} scenario {scenario}: {e}");
        std::process::exit(1);
    }
}

pub fn init() -> Result<Client, String> {
    Client::init().map_err(|e| format!("init: {e}"))
}

pub fn e2s<T>(r: Result<T, CohortError>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Rank `r` of this process's job.
pub fn p(c: &Client, r: u32) -> ProcId {
    ProcId::new(c.nspace(), r)
}

/// The ranks of `procs`, comma-separated (for RESULT lines and messages).
pub fn ranks(procs: &[ProcId]) -> String {
    procs
        .iter()
        .map(|p| p.rank.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A channel fed by a handler for `codes`.
pub fn event_channel(c: &Client, codes: &[i32]) -> crossbeam_channel::Receiver<Event> {
    let (tx, rx) = crossbeam_channel::unbounded();
    c.register_event_handler(Some(codes), move |_, ev| {
        let _ = tx.send(ev.clone());
    });
    rx
}

pub fn next_event(rx: &crossbeam_channel::Receiver<Event>, what: &str) -> Result<Event, String> {
    rx.recv_timeout(EVENT_WAIT)
        .map_err(|_| format!("no {what} event within {EVENT_WAIT:?}"))
}
