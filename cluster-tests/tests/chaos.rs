//! Chaos: real jobs (`chaosprog`, 8 ranks on 4 node servers, `--enable-recovery`)
//! that construct, fence over and destruct a group every round while planned failures
//! land at random moments: a rank SIGKILLed or `_exit`ing without finalize, or a node
//! server SIGKILLed (with its ranks), inside those calls or between rounds (`plan`).
//! Each plan comes from a seed; `COHORT_CHAOS_FROM=SEED COHORT_CHAOS_SEEDS=N` runs other seeds (a failure
//! names its seed and plan, which rerun it).
//!
//! What must hold, whatever the timing (pmix-standard-sets-and-groups.tex:
//! PMIX_GROUP_OPTIONAL, PMIX_GROUP_FT_COLLECTIVE; DESIGN.md: a dead peer is an error or
//! an event, never a hang):
//! * the job ends, and every rank the plan spares finishes every round and finalizes;
//! * no call fails with anything but a loss (`ProcTerminated`, `PeerLost`): no
//!   timeout, no protocol or bad-request error;
//! * a round's construct ends alike at every rank the plan spares: all with the same
//!   membership and context id, or all with an error; every rank that got the group
//!   got that membership; the spared ranks are in it;
//! * a round's fault-tolerant group fence and destruct complete at every spared rank
//!   that got the group (whoever was lost, the fence's root and the group id's
//!   rendezvous included);
//! * context ids are never reused;
//! * every member's data is readable from the construct's result (checked in the
//!   ranks: `FAIL` lines).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cohort_cluster_tests::{cohort_command, example, text, CohortRun};

const NODES: u32 = 4;
const RANKS: u32 = 8;
const ROUNDS: u32 = 6;
/// Far above a chaos job's few seconds, below the sum of two calls' own 30 s limits:
/// reached only by a hang.
const JOB_DEADLINE: Duration = Duration::from_secs(150);

/// A small deterministic generator (splitmix64): the plan of a seed is the same on
/// every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The plan of `seed` (`chaosprog`'s `COHORT_CHAOS_PLAN`), and the ranks it spares.
/// One or two failures, on distinct node servers (two untouched at least);
/// ranks are placed block-wise (rank r on node server r / 2).
fn plan(seed: u64) -> (String, BTreeSet<u32>) {
    let mut rng = Rng(seed);
    let per_node = RANKS / NODES;
    let mut nodes: Vec<u32> = (0..NODES).collect();
    let failures = 1 + rng.below(2) as usize + usize::from(rng.below(4) == 0);
    let failures = failures.min(NODES as usize - 2);
    let mut entries = Vec::new();
    let mut spared: BTreeSet<u32> = (0..RANKS).collect();
    for _ in 0..failures {
        let node = nodes.remove(rng.below(nodes.len() as u64) as usize);
        let rank = node * per_node + rng.below(u64::from(per_node)) as u32;
        let round = rng.below(u64::from(ROUNDS));
        let what = ["kill", "exit", "server"][rng.below(3) as usize];
        // A node server also between rounds, where the losses that follow (its ranks'
        // and its own) meet no call in progress.
        let calls: &[&str] = match what {
            "server" => &["construct", "fence", "destruct", "between"],
            _ => &["construct", "fence", "destruct"],
        };
        let call = calls[rng.below(calls.len() as u64) as usize];
        // Mostly inside the call (a few ms), sometimes well after it.
        let delay = match (call, rng.below(4)) {
            ("between", _) => 0,
            (_, 0) => 5_000 + rng.below(20_000),
            _ => rng.below(3_000),
        };
        entries.push(format!("{rank}:{round}:{call}:{what}:{delay}"));
        if what == "server" {
            spared.retain(|r| r / per_node != node);
        } else {
            spared.remove(&rank);
        }
    }
    (entries.join(","), spared)
}

fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let from = var("COHORT_CHAOS_FROM").unwrap_or(1);
    from..from + var("COHORT_CHAOS_SEEDS").unwrap_or(8)
}

/// What one rank said about one round.
#[derive(Default, Debug)]
struct Round {
    construct: Option<String>,
    fence: Option<String>,
    destruct: Option<String>,
}

fn run_seed(seed: u64) {
    let (plan, spared) = plan(seed);
    let prog = example("chaosprog");
    let (nodes, n, rounds) = (NODES.to_string(), RANKS.to_string(), ROUNDS.to_string());
    let mut cmd = cohort_command([
        "run".as_ref(),
        "--nodes".as_ref(),
        nodes.as_ref(),
        "-n".as_ref(),
        n.as_ref(),
        "--enable-recovery".as_ref(),
        "--tag-output".as_ref(),
        prog.as_os_str(),
        rounds.as_ref(),
    ]);
    cmd.env("COHORT_CHAOS_PLAN", &plan);
    let out = CohortRun::spawn(cmd).wait(JOB_DEADLINE);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let ctx = format!(
        "seed {seed}, plan {plan:?} (rerun: COHORT_CHAOS_FROM={seed} COHORT_CHAOS_SEEDS=1)\n\
         --- stdout:\n{stdout}\n--- stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("FAIL rank"),
        "a rank found wrong data: {ctx}"
    );
    // `--tag-output`: "[job,RANK]<stdout>: TEXT" (Open MPI's form).
    let mut said: BTreeMap<u32, BTreeMap<u32, Round>> = BTreeMap::new();
    let mut done: BTreeSet<u32> = BTreeSet::new();
    for line in stdout.lines() {
        let Some((tag, text)) = line.split_once("]<stdout>: ") else {
            continue;
        };
        let rank: u32 = tag
            .rsplit(',')
            .next()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("untagged line {line:?}: {ctx}"));
        if text.starts_with("CHAOS done") {
            done.insert(rank);
            continue;
        }
        let Some(rest) = text.strip_prefix("RESULT ") else {
            continue;
        };
        let mut words = rest.splitn(3, ' ');
        let (k, call, what) = (words.next(), words.next(), words.next());
        let k: u32 = k.and_then(|k| k.parse().ok()).expect("round number");
        let what = what.unwrap_or_default().to_string();
        let r = said.entry(k).or_default().entry(rank).or_default();
        match call {
            Some("construct") => r.construct = Some(what),
            Some("fence") => r.fence = Some(what),
            Some("destruct") => r.destruct = Some(what),
            other => panic!("unknown call {other:?}: {ctx}"),
        }
    }
    let missing: Vec<_> = spared.difference(&done).collect();
    assert!(
        missing.is_empty(),
        "spared ranks {missing:?} did not finish: {ctx}"
    );
    let mut cids: BTreeMap<String, u32> = BTreeMap::new();
    for (k, ranks) in &said {
        for (rank, r) in ranks {
            for what in [&r.construct, &r.fence, &r.destruct].into_iter().flatten() {
                if let Some(e) = what.strip_prefix("err ") {
                    assert!(
                        e == "ProcTerminated" || e == "PeerLost",
                        "round {k}: rank {rank} got {e}, not a loss: {ctx}"
                    );
                }
            }
        }
        // Every rank that got the group got the same one.
        let groups: BTreeSet<&String> = ranks
            .values()
            .filter_map(|r| r.construct.as_ref())
            .filter(|c| c.starts_with("ok "))
            .collect();
        assert!(
            groups.len() <= 1,
            "round {k}: different groups {groups:?}: {ctx}"
        );
        let spared_said: Vec<&Round> = spared.iter().map(|r| &ranks[r]).collect();
        let first = spared_said[0].construct.as_ref();
        assert!(
            spared_said.iter().all(|r| r.construct.as_ref() == first),
            "round {k}: the spared ranks' constructs ended differently: {ctx}"
        );
        // The group fence and destruct are fault tolerant: whoever is lost (a member,
        // a node server, the fence's root, the group id's rendezvous), they complete
        // for the spared members.
        for (rank, r) in spared.iter().map(|r| (r, &ranks[r])) {
            if r.construct.as_ref().is_some_and(|c| c.starts_with("ok ")) {
                assert_eq!(
                    r.fence.as_deref(),
                    Some("ok"),
                    "round {k}: rank {rank}'s fault-tolerant group fence: {ctx}"
                );
                assert_eq!(
                    r.destruct.as_deref(),
                    Some("ok"),
                    "round {k}: rank {rank}'s fault-tolerant group destruct: {ctx}"
                );
            }
        }
        if let Some(group) = groups.into_iter().next() {
            let mut f = group.split(' ').skip(1);
            let members: BTreeSet<u32> = f
                .next()
                .unwrap_or_default()
                .split(',')
                .map(|m| m.parse().expect("member rank"))
                .collect();
            assert!(
                spared.is_subset(&members),
                "round {k}: group {members:?} lacks spared ranks: {ctx}"
            );
            let cid = f.next().expect("context id").to_string();
            if let Some(before) = cids.insert(cid.clone(), *k) {
                panic!("context id {cid} of round {k} was round {before}'s: {ctx}");
            }
        }
    }
    for k in 0..ROUNDS {
        assert!(said.contains_key(&k), "nobody reported round {k}: {ctx}");
    }
}

#[test]
fn groups_survive_failures_at_random_moments() {
    for seed in seeds() {
        run_seed(seed);
    }
}

#[test]
fn plans_spare_at_least_two_node_servers() {
    for seed in 0..500 {
        let (plan, spared) = plan(seed);
        let entries = plan.split(',').count();
        assert!((1..=2).contains(&entries), "seed {seed}: {plan}");
        assert!(spared.len() >= 4, "seed {seed}: {plan} spares {spared:?}");
    }
}
