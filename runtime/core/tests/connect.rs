//! Connections (PMIx_Connect / PMIx_Disconnect, ../shared/spec/rfc0003-connect-disconnect.md)
//! on in-memory clusters: a connection is a collective construct marked with a
//! [`ConnectMode`]; these tests pin what that mark changes — termination events, the
//! survivors' disconnect, no leaving one by one — with both gathering algorithms.

use cohort_core::cluster::Cluster;
use cohort_proto::event::{codes, keys};
use cohort_proto::msg::{ConnectMode, ConstructOpts, FenceOpts, Request, Response};
use cohort_proto::value::info_get;
use cohort_proto::{CohortError, ProcId, Value};
use cohort_topology::{Allgather, TreeShape};

const ALLGATHERS: [Allgather; 2] = [Allgather::Tree, Allgather::Dissemination];

fn opts(mode: ConnectMode) -> ConstructOpts {
    ConstructOpts {
        connect: Some(mode),
        ..Default::default()
    }
}

fn disconnect(c: &mut Cluster, rank: u32, id: &str) -> u64 {
    c.request(
        rank,
        Request::Destruct {
            id: id.into(),
            timeout_ms: None,
            ft_collective: false,
        },
    )
}

/// 6 ranks on 3 servers; ranks 0-3 connect as `id` (each with its mode); the result
/// is checked at every member.
fn connected(allgather: Allgather, id: &str, mode: impl Fn(u32) -> ConnectMode) -> Cluster {
    let mut c = Cluster::with_allgather(6, 3, TreeShape::KAry(2), allgather);
    c.connect_all();
    let reqs: Vec<u64> = (0..4)
        .map(|r| c.construct(r, id, &[3, 1, 0, 2], opts(mode(r))))
        .collect();
    let members: Vec<ProcId> = (0..4).map(|r| c.proc(r)).collect();
    for r in 0..4 {
        assert_eq!(c.group(r, reqs[r as usize]).members, members, "rank {r}");
    }
    c
}

fn terminated_events(c: &Cluster, rank: u32) -> Vec<cohort_proto::Event> {
    c.events(rank)
        .into_iter()
        .filter(|e| e.code == codes::PROC_TERMINATED)
        .collect()
}

/// rfc0003 PMIx_Disconnect: "Processes that terminate while connected to other
/// processes will generate a termination error event that will be reported to any
/// process in the connected group" — and, since every member must disconnect before
/// terminating, the survivors' disconnect fails naming the dead member.
#[test]
fn a_member_terminating_while_connected_is_reported_and_fails_the_disconnect() {
    for allgather in ALLGATHERS {
        let id = "job.connect-strict";
        let mut c = connected(allgather, id, |_| ConnectMode::Strict);
        c.exit(2);
        for r in [0, 1, 3] {
            let ev = terminated_events(&c, r);
            assert_eq!(ev.len(), 1, "{allgather:?} rank {r}: {ev:?}");
            assert_eq!(ev[0].affected, vec![c.proc(2)]);
            assert_eq!(ev[0].source, c.proc(2));
            assert_eq!(
                info_get(&ev[0].info, keys::NSPACE),
                Some(&Value::Str(id.into()))
            );
        }
        for r in [4, 5] {
            assert!(
                terminated_events(&c, r).is_empty(),
                "not connected: rank {r}"
            );
        }
        let d: Vec<(u32, u64)> = [0, 1, 3].map(|r| (r, disconnect(&mut c, r, id))).into();
        for (r, q) in d {
            assert!(
                matches!(c.error(r, q), CohortError::ProcTerminated { ref procs, .. } if *procs == vec![c.proc(2)]),
                "{allgather:?} rank {r}: {:?}",
                c.reply(r, q)
            );
        }
    }
}

/// rfc0003 PMIX_CONNECT_EARLY_TERM_ALLOWED: "do not generate an error if a process
/// terminates without disconnecting", and the server adjusts "completion requirements
/// on any ongoing or future collectives for this nspace": no event, and the
/// survivors' disconnect completes; the nspace then addresses nothing.
#[test]
fn with_early_termination_allowed_the_survivors_disconnect() {
    for allgather in ALLGATHERS {
        let id = "job.connect-early";
        let mut c = connected(allgather, id, |_| ConnectMode::EarlyTermAllowed);
        c.exit(1);
        for r in [0, 2, 3] {
            assert!(
                terminated_events(&c, r).is_empty(),
                "{allgather:?} rank {r}"
            );
        }
        let d: Vec<(u32, u64)> = [0, 2, 3].map(|r| (r, disconnect(&mut c, r, id))).into();
        for (r, q) in d {
            assert_eq!(
                c.reply(r, q),
                Some(Ok(Response::Done)),
                "{allgather:?} rank {r}"
            );
        }
        let f = c.fence(0, vec![ProcId::wildcard(id)], FenceOpts::default());
        assert!(
            matches!(c.error(0, f), CohortError::UnknownProc { .. }),
            "{allgather:?}: {:?}",
            c.reply(0, f)
        );
        let g = c.request(
            3,
            Request::Get {
                proc: ProcId::new(id, 0),
                key: "k".into(),
                timeout_ms: Some(1000),
                after_commits: 0,
            },
        );
        assert!(
            matches!(c.error(3, g), CohortError::UnknownProc { ref proc, .. } if proc.nspace == id),
            "{allgather:?}: {:?}",
            c.reply(3, g)
        );
    }
}

/// Early termination is allowed only when every participant allowed it: one strict
/// caller makes the connection strict everywhere.
#[test]
fn one_strict_caller_makes_the_connection_strict() {
    for allgather in ALLGATHERS {
        let id = "job.connect-mixed";
        let mut c = connected(allgather, id, |r| {
            if r == 3 {
                ConnectMode::Strict
            } else {
                ConnectMode::EarlyTermAllowed
            }
        });
        c.exit(0);
        for r in [1, 2, 3] {
            assert_eq!(terminated_events(&c, r).len(), 1, "{allgather:?} rank {r}");
        }
    }
}

/// A plain group (no connect mode) raises no termination event: the event is the
/// connection's.
#[test]
fn a_plain_group_member_terminating_raises_no_termination_event() {
    let mut c = Cluster::new(4, 2, TreeShape::KAry(2));
    c.connect_all();
    let reqs: Vec<u64> = (0..4)
        .map(|r| c.construct(r, "plain", &[0, 1, 2, 3], ConstructOpts::default()))
        .collect();
    c.group(0, reqs[0]);
    c.exit(3);
    for r in 0..3 {
        assert!(terminated_events(&c, r).is_empty(), "rank {r}");
    }
}

/// sets-and-groups §Destruct procedure: processes that assemble via PMIx_Connect
/// "must all depart the assemblage together" — leave is refused, the member stays.
#[test]
fn members_cannot_leave_a_connection() {
    let id = "job.connect-leave";
    let mut c = connected(Allgather::Tree, id, |_| ConnectMode::Strict);
    let l = c.request(1, Request::Leave { id: id.into() });
    assert!(
        matches!(c.error(1, l), CohortError::BadRequest(ref m) if m.contains("together")),
        "{:?}",
        c.reply(1, l)
    );
    let q = c.request(0, Request::QueryGroup { id: id.into() });
    match c.reply(0, q) {
        Some(Ok(Response::Group(g))) => assert_eq!(g.members.len(), 4),
        other => panic!("{other:?}"),
    }
    let d: Vec<(u32, u64)> = (0..4).map(|r| (r, disconnect(&mut c, r, id))).collect();
    for (r, q) in d {
        assert_eq!(c.reply(r, q), Some(Ok(Response::Done)), "rank {r}");
    }
}

/// The nspace is a process-set address while connected: fence over `{nspace,*}` and
/// get of `{nspace, rank}` (rank = index in the canonical membership).
#[test]
fn the_connection_nspace_addresses_its_members() {
    let id = "job.connect-addr";
    let mut c = connected(Allgather::Tree, id, |_| ConnectMode::Strict);
    for r in 0..4 {
        c.request(
            r,
            Request::Commit {
                local: vec![],
                remote: vec![("k".into(), Value::U32(100 + r))],
            },
        );
    }
    let f: Vec<u64> = (0..4)
        .map(|r| {
            c.fence(
                r,
                vec![ProcId::wildcard(id)],
                FenceOpts {
                    collect: true,
                    timeout_ms: None,
                    ft_collective: false,
                },
            )
        })
        .collect();
    for r in 0..4 {
        assert_eq!(
            c.reply(r, f[r as usize]),
            Some(Ok(Response::Done)),
            "rank {r}"
        );
    }
    let g = c.request(
        0,
        Request::Get {
            proc: ProcId::new(id, 3),
            key: "k".into(),
            timeout_ms: Some(1000),
            after_commits: 0,
        },
    );
    assert_eq!(c.reply(0, g), Some(Ok(Response::Value(Value::U32(103)))));
}

/// A member that connected and terminated before the connect's outcome reached its
/// server is still a member, and the termination is reported once the connection
/// exists there: the survivor on the dead member's server hears of it when the
/// outcome arrives, the members elsewhere when the termination does.
#[test]
fn a_member_dying_before_the_outcome_arrives_is_reported_when_it_does() {
    // Ranks 0-1 on server 0, 2-3 on server 1. Find an id whose root is server 0: with
    // the link 0 → 1 held, only server 0's ranks are answered.
    for n in 0..64 {
        let id = format!("job.connect-late-{n}");
        let mut c = Cluster::new(4, 2, TreeShape::KAry(2));
        c.connect_all();
        c.hold(0, 1);
        let reqs: Vec<u64> = (0..4)
            .map(|r| c.construct(r, &id, &[0, 1, 2, 3], opts(ConnectMode::Strict)))
            .collect();
        if c.reply(0, reqs[0]).is_none() {
            continue;
        }
        assert!(
            c.reply(2, reqs[2]).is_none(),
            "the outcome to server 1 is held"
        );
        // Rank 3 (server 1) joined and dies before its server has the connection.
        c.exit(3);
        for r in [0, 1] {
            assert_eq!(terminated_events(&c, r).len(), 1, "rank {r}");
        }
        assert!(
            terminated_events(&c, 2).is_empty(),
            "no connection on server 1 yet"
        );
        c.release(0, 1);
        c.pump();
        assert_eq!(c.group(2, reqs[2]).members.len(), 4);
        for r in 0..3 {
            let ev = terminated_events(&c, r);
            assert_eq!(ev.len(), 1, "rank {r}: {ev:?}");
            assert_eq!(ev[0].affected, vec![c.proc(3)]);
        }
        return;
    }
    panic!("no id with its root on server 0 among 64");
}

/// rfc0003 PMIX_CONNECT_EARLY_TERM_ALLOWED: "The host RM and PMIx server are
/// responsible for adjusting completion requirements on any ongoing or future
/// collectives for this nspace": a fence over `{nspace,*}` that is in progress when a
/// member terminates, and one started after, complete among the survivors. Over a
/// strict connection the same fence fails naming the dead member.
#[test]
fn fences_over_an_early_term_connection_complete_without_the_dead() {
    for allgather in ALLGATHERS {
        for mode in [ConnectMode::EarlyTermAllowed, ConnectMode::Strict] {
            let id = "job.connect-fence";
            let mut c = connected(allgather, id, |_| mode);
            let ns = || vec![ProcId::wildcard(id)];
            // Ongoing: the survivors called before rank 2 terminates.
            let f: Vec<(u32, u64)> = [0, 1, 3]
                .map(|r| (r, c.fence(r, ns(), FenceOpts::default())))
                .into();
            for &(r, q) in &f {
                assert_eq!(c.reply(r, q), None, "{allgather:?} {mode:?} rank {r}");
            }
            c.exit(2);
            // Future: a fence started afterwards.
            let g: Vec<(u32, u64)> = [0, 1, 3]
                .map(|r| (r, c.fence(r, ns(), FenceOpts::default())))
                .into();
            for (r, q) in f.into_iter().chain(g) {
                let got = c.reply(r, q);
                match mode {
                    ConnectMode::EarlyTermAllowed => {
                        assert_eq!(got, Some(Ok(Response::Done)), "{allgather:?} rank {r}")
                    }
                    ConnectMode::Strict => assert!(
                        matches!(got, Some(Err(CohortError::ProcTerminated { ref procs, .. })) if *procs == vec![c.proc(2)]),
                        "{allgather:?} rank {r}: {got:?}"
                    ),
                }
            }
        }
    }
}
