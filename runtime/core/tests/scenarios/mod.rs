//! Scenarios shared by the hostile-input replays (`hostile.rs`) and the schedule
//! exploration (`schedules.rs`): each drives an in-memory cluster of the node servers'
//! engines (6 ranks on 3 servers) through a real sequence of operations, making only
//! requests, never asserting: the including test decides what must hold.

#![allow(dead_code)]

use std::time::Duration;

use cohort_core::cluster::Cluster;
use cohort_proto::msg::{ConstructDecision, ConstructOpts, FenceOpts, InviteOpts, Request};
use cohort_proto::{ProcId, Range, Value};
use cohort_topology::{Allgather, TreeShape};

/// xorshift64*: small, deterministic, good enough to pick mutations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The default cluster: 6 ranks on 3 servers. The scenarios name ranks 0–5 (two per
/// server in it); in a larger cluster the other ranks take part in whole-job fences
/// and whole-job constructs only.
pub const RANKS: u32 = 6;
pub const NODES: u32 = 3;

/// An add-member's options: a timeout, nothing else.
pub fn add_member_opts() -> ConstructOpts {
    ConstructOpts {
        timeout_ms: Some(10_000),
        ..Default::default()
    }
}

/// `r` answers the invitation to group `id` from `leader`.
pub fn join(c: &mut Cluster, r: u32, id: &str, leader: &ProcId, accept: bool, timeout_ms: u64) {
    c.request(
        r,
        Request::Join {
            id: id.into(),
            leader: leader.clone(),
            accept,
            timeout_ms: Some(timeout_ms),
            group_info: vec![],
        },
    );
}

/// Every rank of `c`'s job.
pub fn everyone(c: &Cluster) -> std::ops::Range<u32> {
    0..c.job.size()
}

pub fn proc(c: &Cluster, r: u32) -> ProcId {
    c.proc(r)
}

pub fn commit(c: &mut Cluster, r: u32, key: &str, v: Value) {
    c.request(
        r,
        Request::Commit {
            local: vec![],
            remote: vec![(key.into(), v)],
        },
    );
}

pub fn fence_all(c: &mut Cluster, collect: bool, timeout_ms: Option<u64>) {
    for r in everyone(c) {
        c.fence(
            r,
            vec![],
            FenceOpts {
                collect,
                timeout_ms,
                ft_collective: false,
            },
        );
    }
}

pub fn get(c: &mut Cluster, r: u32, of: ProcId, key: &str) {
    c.request(
        r,
        Request::Get {
            proc: of,
            key: key.into(),
            timeout_ms: Some(2_000),
            after_commits: 0,
        },
    );
}

/// Fences with and without data, a direct-modex get, a subset fence, events, a
/// fault-tolerant fence; a group of everyone and its fault-tolerant destruct.
pub fn fences_and_data(c: &mut Cluster) {
    for r in everyone(c) {
        commit(c, r, "ep", Value::Bytes(vec![r as u8; 40].into()));
    }
    fence_all(c, true, Some(5_000));
    commit(c, 5, "late", Value::U64(5));
    let p5 = proc(c, 5);
    get(c, 0, p5, "late");
    let subset = vec![proc(c, 1), proc(c, 4)];
    c.fence(
        1,
        subset.clone(),
        FenceOpts {
            collect: true,
            timeout_ms: Some(3_000),
            ft_collective: false,
        },
    );
    c.fence(
        4,
        subset,
        FenceOpts {
            collect: true,
            timeout_ms: Some(3_000),
            ft_collective: false,
        },
    );
    c.request(
        2,
        Request::Notify {
            code: -1001,
            range: Range::Session,
            info: vec![("why".into(), Value::Str("test".into()))],
        },
    );
    let target = vec![proc(c, 0), proc(c, 5)];
    c.request(
        3,
        Request::Notify {
            code: -1002,
            range: Range::Procs(target),
            info: vec![],
        },
    );
    fence_all(c, false, None);
    // A fault-tolerant fence with data and no timeout: with a server lost anywhere
    // (schedules.rs), it completes among the survivors, also when the lost server was
    // its root.
    for r in everyone(c) {
        c.fence(
            r,
            vec![],
            FenceOpts {
                collect: true,
                timeout_ms: None,
                ft_collective: true,
            },
        );
    }
    // A group of everyone (optional: members lost drop out) and, once every call of it
    // ended, its fault-tolerant destruct with no timeout: with a server lost anywhere,
    // the id's rendezvous too, it ends for every member that has the group.
    let all: Vec<u32> = everyone(c).collect();
    for &r in &all {
        let opts = ConstructOpts {
            optional: true,
            assign_context_id: true,
            timeout_ms: Some(5_000),
            ..Default::default()
        };
        c.construct(r, "ftg", &all, opts);
    }
    c.advance(Duration::ZERO);
    for &r in &all {
        c.request(
            r,
            Request::Destruct {
                id: "ftg".into(),
                timeout_ms: None,
                ft_collective: true,
            },
        );
    }
}

/// Collective construct with add-members, group info and a context id; a group fence,
/// a get by group rank; leave; the global failure view; destruct.
pub fn collective_group(c: &mut Cluster) {
    let leaders: Vec<u32> = (0..4).collect();
    let adds = vec![proc(c, 4), proc(c, 5)];
    for &r in &leaders {
        commit(c, r, "addr", Value::U64(u64::from(r)));
        let opts = ConstructOpts {
            assign_context_id: true,
            timeout_ms: Some(10_000),
            add_members: if r == 0 { adds.clone() } else { vec![] },
            group_info: vec![(format!("info{r}"), Value::U64(7))],
            notify_termination: r == 1,
            ..Default::default()
        };
        c.construct(r, "g", &leaders, opts);
    }
    // Add-members with a timeout: one whose naming leader is lost before its call
    // reached the root joins a construct nobody else will join (schedules.rs).
    c.construct(4, "g", &[], add_member_opts());
    c.construct(5, "g", &[], add_member_opts());
    for r in 0..6 {
        c.fence(
            r,
            vec![ProcId::wildcard("g")],
            FenceOpts {
                collect: true,
                timeout_ms: Some(5_000),
                ft_collective: false,
            },
        );
    }
    get(c, 4, ProcId::new("g", 2), "addr");
    c.request(3, Request::Leave { id: "g".into() });
    // The members left agree on the failed ones (none, unless a loss is injected).
    for r in [0, 1, 2, 4, 5] {
        c.request(
            r,
            Request::FailedGlobal {
                id: "g".into(),
                timeout_ms: Some(5_000),
            },
        );
    }
    for r in [0, 1, 2, 4, 5] {
        c.request(
            r,
            Request::Destruct {
                id: "g".into(),
                timeout_ms: Some(5_000),
                ft_collective: false,
            },
        );
    }
    c.request(2, Request::QueryGroupNames);
}

/// Bootstrap construct (two leaders, add-members), then invite/join with a decline that
/// the leader decides about.
pub fn bootstrap_and_invite(c: &mut Cluster) {
    for (leader, adds) in [(0u32, vec![1u32, 2]), (5, vec![3])] {
        let opts = ConstructOpts {
            bootstrap: Some(2),
            assign_context_id: true,
            add_members: adds.iter().map(|&a| proc(c, a)).collect(),
            timeout_ms: Some(10_000),
            ..Default::default()
        };
        c.construct(leader, "bs", &[leader], opts);
    }
    for r in [1, 2, 3] {
        c.construct(r, "bs", &[], add_member_opts());
    }
    let invitees = vec![proc(c, 1), proc(c, 3), proc(c, 4)];
    c.request(
        0,
        Request::Invite {
            id: "iv".into(),
            procs: invitees,
            opts: InviteOpts {
                assign_context_id: true,
                decide_declines: true,
                timeout_ms: Some(10_000),
                ..Default::default()
            },
        },
    );
    let leader = proc(c, 0);
    for (r, accept) in [(1, true), (3, false), (4, true)] {
        join(c, r, "iv", &leader, accept, 10_000);
    }
    let p5 = proc(c, 5);
    c.request(
        0,
        Request::Decide {
            id: "iv".into(),
            decision: ConstructDecision::Invite(vec![p5]),
        },
    );
    join(c, 5, "iv", &leader, true, 10_000);
}

/// A construct that times out because a leader never calls, an optional construct
/// whose member exits, and a construct in flight when a server is lost.
pub fn timeouts_and_failures(c: &mut Cluster) {
    let leaders: Vec<u32> = everyone(c).collect();
    for r in 0..c.job.size() - 1 {
        let opts = ConstructOpts {
            timeout_ms: Some(1_000),
            ..Default::default()
        };
        c.construct(r, "slow", &leaders, opts);
    }
    c.advance(Duration::from_millis(1_500));
    let members = [0u32, 2, 3];
    for &r in &members[..2] {
        let opts = ConstructOpts {
            optional: true,
            timeout_ms: Some(5_000),
            ..Default::default()
        };
        c.construct(r, "opt", &members, opts);
    }
    c.exit(3);
    let leaders = [0u32, 1, 4, 5];
    for &r in &leaders[..3] {
        let opts = ConstructOpts {
            notify_termination: true,
            timeout_ms: Some(5_000),
            ..Default::default()
        };
        c.construct(r, "lost", &leaders, opts);
    }
    c.kill_node(2);
    fence_all_alive(c);
}

/// A member dies before a notify-termination construct; the designated leader (on
/// another server than the root) decides to continue; a join nobody invited and one to
/// an invite that named others are refused; an event goes to a group's members; the
/// group is queried and destructed.
pub fn decisions_and_refusals(c: &mut Cluster) {
    c.exit(4);
    let all: Vec<u32> = (0..6).collect();
    for r in [0u32, 1, 2, 3, 5] {
        let opts = ConstructOpts {
            notify_termination: true,
            leader: r == 2,
            assign_context_id: true,
            timeout_ms: Some(8_000),
            ..Default::default()
        };
        c.construct(r, "nt", &all, opts);
    }
    c.request(
        0,
        Request::Decide {
            id: "nt".into(),
            decision: ConstructDecision::Continue,
        },
    );
    c.request(
        2,
        Request::Decide {
            id: "nt".into(),
            decision: ConstructDecision::Continue,
        },
    );
    let leader = proc(c, 0);
    join(c, 3, "nobody", &leader, true, 2_000);
    let p1 = proc(c, 1);
    c.request(
        0,
        Request::Invite {
            id: "only1".into(),
            procs: vec![p1],
            // With requests overlapping (schedules.rs), rank 1 may answer before the
            // invitation exists (a real invitee answers the invitation's event): the
            // invite then ends by this timeout.
            opts: InviteOpts {
                timeout_ms: Some(5_000),
                ..Default::default()
            },
        },
    );
    for r in [5u32, 1] {
        join(c, r, "only1", &leader, true, 2_000);
    }
    c.request(
        5,
        Request::Notify {
            code: -1003,
            range: Range::Group("nt".into()),
            info: vec![],
        },
    );
    c.request(3, Request::QueryGroup { id: "nt".into() });
    for r in [0u32, 1, 2, 3, 5] {
        c.request(
            r,
            Request::Destruct {
                id: "nt".into(),
                timeout_ms: Some(5_000),
                ft_collective: false,
            },
        );
    }
}

pub fn fence_all_alive(c: &mut Cluster) {
    for r in [0, 1, 2] {
        c.fence(
            r,
            vec![],
            FenceOpts {
                collect: false,
                timeout_ms: Some(2_000),
                ft_collective: false,
            },
        );
    }
}

pub type Scenario = fn(&mut Cluster);

pub const SCENARIOS: [(&str, Scenario); 5] = [
    ("fences_and_data", fences_and_data),
    ("collective_group", collective_group),
    ("bootstrap_and_invite", bootstrap_and_invite),
    ("timeouts_and_failures", timeouts_and_failures),
    ("decisions_and_refusals", decisions_and_refusals),
];

pub fn cluster(allgather: Allgather) -> Cluster {
    cluster_of(RANKS, NODES, allgather)
}

/// `ranks` ranks on `nodes` servers (block mapping, binary trees), all connected.
pub fn cluster_of(ranks: u32, nodes: u32, allgather: Allgather) -> Cluster {
    let mut c = Cluster::with_allgather(ranks, nodes, TreeShape::KAry(2), allgather);
    c.connect_all();
    c
}

/// Lets every timer of every engine fire (the longest timeout above is 10 s).
pub fn run_out_the_clock(c: &mut Cluster) {
    for _ in 0..30 {
        c.advance(Duration::from_millis(500));
    }
}
