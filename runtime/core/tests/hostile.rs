//! A buggy or hostile peer or client must not take a node server down (DESIGN.md,
//! "the wire is hostile"; issue 2: bad input gets a typed error and the server keeps
//! serving everyone else). The frame layer rejects what does not decode; this suite is
//! about what does: well-formed messages whose contents are wrong.
//!
//! Each scenario (`scenarios/mod.rs`) drives an in-memory cluster of the node servers'
//! engines through a real sequence of operations (fences with data, the three
//! construction methods, group fences and gets, leave, destruct, events, timeouts, a
//! server's loss, a leader's decision, refused joins). The scenario is then replayed
//! once per peer message and per client request, with that one message rewritten:
//! - its encoded bytes mutated (bit flips, bytes set to edge values, integers widened
//!   to their extremes, slices cut or repeated) and decoded again, as a frame from a
//!   peer with a memory error or another build would arrive (what fails to decode is
//!   the frame layer's case and is skipped here);
//! - its fields mutated through serde, keeping its shape (see [`Mutator::Fields`]);
//! - delivered twice, or attributed to another server, or to another receiver, or
//!   replayed at the end of the scenario.
//!
//! After each replay the clock runs on past every timeout. The assertions: no engine
//! panics (a panic in `cohortd` ends the whole job), no message storm (more than 20×
//! the untampered message count, [`Cluster::storm_limit`]), and decoding a mutated frame
//! never expands it beyond its declared bounds (the test would run out of memory or
//! time if it did). The seeds are fixed, so a failure names a reproducible case.

mod scenarios;

use std::panic::{catch_unwind, AssertUnwindSafe};

use cohort_core::cluster::Cluster;
use cohort_proto::frame::{decode_body, encode_body};
use cohort_proto::msg::{FenceOpts, Request};
use cohort_proto::peer::PeerMsg;
use cohort_proto::{NodeId, ProcId};
use cohort_topology::Allgather;
use scenarios::*;

/// Mutations of each kind tried per message (each a different seed); a longer sweep:
/// `COHORT_FUZZ_MUTATIONS=1000 cargo test -p cohort-core --test hostile` (and
/// `COHORT_FUZZ_SIZE=16x8` for a larger cluster, see [`fuzz_cluster`]).
fn mutations() -> u64 {
    std::env::var("COHORT_FUZZ_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// One to three random edits of `bytes`.
fn mutate(bytes: &mut Vec<u8>, rng: &mut Rng) {
    const EDGES: [u64; 8] = [0, 1, 2, 0x7f, 0xff, 0xffff, u32::MAX as u64, u64::MAX];
    for _ in 0..1 + rng.below(3) {
        if bytes.is_empty() {
            bytes.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(bytes.len());
        match rng.below(6) {
            0 => bytes[at] ^= 1 << rng.below(8),
            1 => bytes[at] = [0u8, 1, 0x7f, 0x80, 0xff][rng.below(5)],
            2 => {
                // An integer field (bincode writes them fixed-width, little-endian)
                // set to an edge value.
                let width = [1usize, 2, 4, 8][rng.below(4)];
                let v = EDGES[rng.below(EDGES.len())].to_le_bytes();
                for (i, b) in v.iter().take(width).enumerate() {
                    if let Some(x) = bytes.get_mut(at + i) {
                        *x = *b;
                    }
                }
            }
            3 => bytes.truncate(at),
            4 => {
                let end = (at + 1 + rng.below(16)).min(bytes.len());
                let piece = bytes[at..end].to_vec();
                bytes.splice(at..at, piece);
            }
            _ => bytes[at] = rng.next() as u8,
        }
    }
}

/// How a message is mutated.
#[derive(Clone, Copy, Debug)]
enum Mutator {
    /// Its encoded bytes edited, then decoded again: what a frame from a peer with a
    /// memory error or another build looks like. Most such frames no longer decode.
    Bytes,
    /// Its fields edited, keeping its shape: numbers set to edge values, strings
    /// emptied, lengthened or swapped for another of the message's strings, lists
    /// emptied, cut, reversed or with an element repeated, flags flipped. Every one
    /// decodes, so these reach the engine's handling of wrong contents.
    Fields,
}

/// `msg` mutated by `how` with `seed`; `None` when the result no longer decodes.
fn mutated<T: serde::Serialize + serde::de::DeserializeOwned>(
    msg: &T,
    how: Mutator,
    seed: u64,
) -> Option<T> {
    let mut rng = Rng::new(seed);
    match how {
        Mutator::Bytes => {
            let mut bytes = encode_body(msg);
            mutate(&mut bytes, &mut rng);
            decode_body(&bytes).ok()
        }
        Mutator::Fields => {
            let mut v = serde_json::to_value(msg).ok()?;
            let mut strings = Vec::new();
            collect_strings(&v, &mut strings);
            let edits = 1 + rng.below(3);
            for _ in 0..edits {
                let n = count_nodes(&v);
                let mut at = rng.below(n);
                edit_node(&mut v, &mut at, &mut rng, &strings);
            }
            serde_json::from_value(v).ok()
        }
    }
}

fn collect_strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}

/// Nodes of `v`, the object and array nodes included, depth first.
fn count_nodes(v: &serde_json::Value) -> usize {
    1 + match v {
        serde_json::Value::Array(a) => a.iter().map(count_nodes).sum(),
        serde_json::Value::Object(o) => o.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Edits the `*at`-th node of `v` (depth first); returns whether it was found.
fn edit_node(v: &mut serde_json::Value, at: &mut usize, rng: &mut Rng, strings: &[String]) -> bool {
    use serde_json::Value as J;
    if *at == 0 {
        match v {
            J::Bool(b) => *b = !*b,
            J::Number(n) => {
                // Edge values of the field's likely width; kept within what a u32
                // length may say, so a list the edit lengthens stays a few million
                // processes at most (the decoder's own bound).
                let edges: [u64; 9] = [0, 1, 2, 3, 7, 255, 65_535, u32::MAX as u64, u64::MAX];
                let e = edges[rng.below(edges.len())];
                *n = if n.is_i64() && !n.is_u64() {
                    (-(e.min(i64::MAX as u64) as i64)).into()
                } else {
                    e.into()
                };
            }
            J::String(s) => {
                *s = match rng.below(4) {
                    0 => String::new(),
                    1 => "x".repeat(300),
                    2 => strings[rng.below(strings.len())].clone(),
                    _ => format!("{s}*"),
                }
            }
            J::Array(a) if !a.is_empty() => match rng.below(4) {
                0 => a.clear(),
                1 => {
                    let i = rng.below(a.len());
                    a.remove(i);
                }
                2 => a.reverse(),
                _ => {
                    let i = rng.below(a.len());
                    let x = a[i].clone();
                    a.insert(i, x);
                }
            },
            _ => {}
        }
        return true;
    }
    *at -= 1;
    match v {
        J::Array(a) => a.iter_mut().any(|x| edit_node(x, at, rng, strings)),
        J::Object(o) => o.values_mut().any(|x| edit_node(x, at, rng, strings)),
        _ => false,
    }
}

/// What happens to the one message a replay rewrites.
#[derive(Clone, Copy, Debug)]
enum Rewrite {
    /// Mutated with this seed.
    Mutated(Mutator, u64),
    Twice,
    /// Attributed to the next server (mod the cluster's size).
    OtherSender,
    /// Delivered to the next server instead.
    OtherReceiver,
    /// Delivered, and delivered again after the scenario.
    Replayed,
}

fn rewrites() -> Vec<Rewrite> {
    let mut v: Vec<Rewrite> = Vec::new();
    for how in [Mutator::Bytes, Mutator::Fields] {
        v.extend((0..mutations()).map(|seed| Rewrite::Mutated(how, seed)));
    }
    v.extend([
        Rewrite::Twice,
        Rewrite::OtherSender,
        Rewrite::OtherReceiver,
        Rewrite::Replayed,
    ]);
    v
}

/// The replays' cluster: the scenarios' 6 ranks on 3 servers, or
/// `COHORT_FUZZ_SIZE=RANKSxSERVERS` (e.g. `16x8`, trees with inner servers).
fn fuzz_cluster(allgather: Allgather) -> Cluster {
    let size = std::env::var("COHORT_FUZZ_SIZE").ok().and_then(|v| {
        let (r, n) = v.split_once('x')?;
        Some((r.parse().ok()?, n.parse().ok()?))
    });
    let (ranks, nodes) = size.unwrap_or((RANKS, NODES));
    cluster_of(ranks, nodes, allgather)
}

/// Runs `scenario` untampered: how many peer messages and client requests it makes.
fn counts(scenario: Scenario, allgather: Allgather) -> (u64, u64) {
    let mut c = fuzz_cluster(allgather);
    scenario(&mut c);
    run_out_the_clock(&mut c);
    (c.deliveries, c.requests)
}

/// More peer messages than this in one replay is a storm: servers that keep answering
/// each other (reported as a failure, like a panic).
fn storm_limit(untampered: u64) -> u64 {
    untampered * 20 + 200
}

fn replay_peer(scenario: Scenario, allgather: Allgather, target: u64, rw: Rewrite, limit: u64) {
    let mut c = fuzz_cluster(allgather);
    let replay = std::rc::Rc::new(std::cell::RefCell::new(None));
    let keep = replay.clone();
    let servers = c.engines.len() as NodeId;
    let next = move |n: NodeId| (n + 1) % servers;
    c.storm_limit = Some(limit);
    c.tamper_peer = Some(Box::new(move |seq, from, to, msg: PeerMsg| {
        if seq != target {
            return vec![(from, to, msg)];
        }
        match rw {
            Rewrite::Mutated(how, seed) => match mutated(&msg, how, seed ^ (target << 20)) {
                Some(m) => vec![(from, to, m)],
                None => vec![(from, to, msg)],
            },
            Rewrite::Twice => vec![(from, to, msg.clone()), (from, to, msg)],
            Rewrite::OtherSender if next(from) != to => vec![(next(from), to, msg)],
            Rewrite::OtherSender => vec![(next(next(from)), to, msg)],
            Rewrite::OtherReceiver if next(to) != from => vec![(from, next(to), msg)],
            Rewrite::OtherReceiver => vec![(from, next(next(to)), msg)],
            Rewrite::Replayed => {
                *keep.borrow_mut() = Some((from, to, msg.clone()));
                vec![(from, to, msg)]
            }
        }
    }));
    scenario(&mut c);
    if let Some((from, to, msg)) = replay.borrow_mut().take() {
        let now = c.now;
        c.engines[to as usize].on_peer(from, msg, now);
        c.pump();
    }
    run_out_the_clock(&mut c);
}

fn replay_request(scenario: Scenario, allgather: Allgather, target: u64, rw: Rewrite, limit: u64) {
    let mut c = fuzz_cluster(allgather);
    c.storm_limit = Some(limit);
    c.tamper_request = Some(Box::new(move |seq, _rank, req: Request| {
        if seq != target {
            return req;
        }
        match rw {
            Rewrite::Mutated(how, seed) => mutated(&req, how, seed ^ (target << 20)).unwrap_or(req),
            _ => req,
        }
    }));
    scenario(&mut c);
    run_out_the_clock(&mut c);
}

/// Runs `f`; on a panic, fails naming the case.
fn guarded(case: String, f: impl FnOnce()) -> Option<String> {
    catch_unwind(AssertUnwindSafe(f)).err().map(|e| {
        let what = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let what: String = what.chars().take(700).collect();
        format!("{case}: {what}")
    })
}

fn fuzz(allgather: Allgather) {
    let mut failures = Vec::new();
    let mut cases = 0;
    for (name, scenario) in SCENARIOS {
        let (msgs, reqs) = counts(scenario, allgather);
        let limit = storm_limit(msgs);
        assert!(msgs > 0, "{name}: the scenario sends peer messages");
        for target in 0..msgs {
            for rw in rewrites() {
                cases += 1;
                let case = format!("{name} ({allgather:?}), peer message {target}, {rw:?}");
                failures.extend(guarded(case, || {
                    replay_peer(scenario, allgather, target, rw, limit)
                }));
            }
        }
        for target in 0..reqs {
            for rw in rewrites()
                .into_iter()
                .filter(|r| matches!(r, Rewrite::Mutated(..)))
            {
                cases += 1;
                let case = format!("{name} ({allgather:?}), client request {target}, {rw:?}");
                failures.extend(guarded(case, || {
                    replay_request(scenario, allgather, target, rw, limit)
                }));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} rewritten replays panicked an engine:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn rewritten_peer_messages_and_requests_never_panic_an_engine_tree() {
    fuzz(Allgather::Tree);
}

#[test]
fn rewritten_peer_messages_and_requests_never_panic_an_engine_dissemination() {
    fuzz(Allgather::Dissemination);
}

/// The mutators do change messages, and changed messages do decode: the replays above
/// exercise the engines, not just the decoder's error path.
#[test]
fn mutations_change_messages_and_still_decode() {
    let mut c = cluster(Allgather::Tree);
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let keep = seen.clone();
    c.tamper_peer = Some(Box::new(move |_, from, to, msg: PeerMsg| {
        keep.borrow_mut().push(msg.clone());
        vec![(from, to, msg)]
    }));
    collective_group(&mut c);
    let seen = seen.borrow();
    let total = seen.len() * 100;
    for how in [Mutator::Bytes, Mutator::Fields] {
        let (mut decoded, mut changed) = (0, 0);
        for (i, m) in seen.iter().enumerate() {
            for seed in 0..100 {
                if let Some(x) = mutated(m, how, seed ^ ((i as u64) << 20)) {
                    decoded += 1;
                    changed += usize::from(&x != m);
                }
            }
        }
        match how {
            // Most edited frames fail to decode, but a fair share does not.
            Mutator::Bytes => assert!(
                changed > total / 20 && decoded < total,
                "{how:?}: {decoded} of {total} decoded, {changed} changed"
            ),
            // Most field edits decode to a different message (the rest set a value out
            // of its field's range, cut a tuple, or land on the value already there).
            Mutator::Fields => assert!(
                changed > total * 2 / 5,
                "{how:?}: {decoded} of {total} decoded, {changed} changed"
            ),
        }
    }
}

/// Found by the replays above: a fence message whose participant list is not the one
/// its id names (here node 0 says the fence over ranks 0–5 is over ranks 0–1) gave the
/// root another tree and root than node 0 had, and after the timeout each sent the
/// other the abort, for ever. Such a message is dropped now: the fence times out as if
/// it had been lost, and ends on every server.
#[test]
fn a_fence_message_contradicting_its_id_is_dropped() {
    let mut c = cluster(Allgather::Tree);
    let (p0, p1) = (proc(&c, 0), proc(&c, 1));
    c.storm_limit = Some(100);
    c.tamper_peer = Some(Box::new(move |_, from, to, msg: PeerMsg| match msg {
        PeerMsg::CollUp {
            key,
            spec: cohort_proto::peer::CollSpec::Fence { collect, .. },
            contribs,
            excused,
            rerouted,
            attempt,
        } if from == 0 => {
            let spec = cohort_proto::peer::CollSpec::Fence {
                procs: vec![p0.clone(), p1.clone()].into(),
                collect,
                tolerate_terminated: false,
            };
            vec![(
                from,
                to,
                PeerMsg::CollUp {
                    key,
                    spec,
                    contribs,
                    excused,
                    rerouted,
                    attempt,
                },
            )]
        }
        msg => vec![(from, to, msg)],
    }));
    let reqs: Vec<u64> = (0..RANKS)
        .map(|r| {
            c.fence(
                r,
                vec![],
                FenceOpts {
                    collect: true,
                    timeout_ms: Some(1_000),
                    ft_collective: false,
                },
            )
        })
        .collect();
    run_out_the_clock(&mut c);
    for (r, id) in reqs.into_iter().enumerate() {
        let reply = c.reply(r as u32, id);
        assert!(
            matches!(reply, Some(Err(cohort_proto::CohortError::Timeout { .. }))),
            "rank {r}: expected a timeout, got {reply:?}"
        );
    }
    for e in &c.engines {
        assert_eq!(e.collectives_in_progress(), 0, "node {}", e.node());
    }
}

/// Found by the replays above: an outcome for an invite (which goes straight from the
/// invite's tracker to each participant's server, without a spec) that carried a spec
/// made its receiver, which does not track the invite, take itself for the root of a
/// tree and pass the outcome to the other servers, which passed it on in turn, for
/// ever. Such a message is dropped now.
#[test]
fn an_invite_outcome_naming_a_spec_is_dropped() {
    let mut c = cluster(Allgather::Tree);
    c.storm_limit = Some(50);
    let members: Vec<ProcId> = (0..RANKS).map(|r| proc(&c, r)).collect();
    let msg = PeerMsg::CollDown {
        key: cohort_proto::peer::CollKey {
            kind: cohort_proto::peer::CollKind::Invite,
            id: "nt".into(),
            seq: 0,
        },
        spec: Some(cohort_proto::peer::CollSpec::Destruct {
            members: members.into(),
            notify_termination: false,
        }),
        outcome: cohort_proto::peer::CollOutcome::Destruct,
        late: vec![],
        attempt: 0,
        lean: None,
    };
    let now = c.now;
    c.engines[1].on_peer(0, msg, now);
    c.pump();
    run_out_the_clock(&mut c);
    assert_eq!(c.deliveries, 0, "nothing passed on");
}
/// Found by the replays above (a field edit set a fence participant's rank to
/// u32::MAX): checking a peer's fence list against its id built the list's signature,
/// which added 1 to the largest rank (a panic where overflow is checked).
#[test]
fn a_fence_list_ending_at_the_largest_rank_has_a_signature() {
    let p = |r| ProcId::new("job", r);
    let sig = cohort_core::engine::signature(&[p(0), p(u32::MAX - 1), p(u32::MAX)]);
    assert_eq!(sig, format!("job:0,{}-{}", u32::MAX - 1, u32::MAX));
    let (msgs, _) = counts(fences_and_data, Allgather::Dissemination);
    let rw = Rewrite::Mutated(Mutator::Fields, 977);
    replay_peer(
        fences_and_data,
        Allgather::Dissemination,
        10,
        rw,
        storm_limit(msgs),
    );
}
