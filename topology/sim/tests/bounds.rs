//! Issue 4's structural bounds on the node servers' collectives, checked by running
//! the real engines in the simulator (and the schedule model up to 16384 servers):
//! rounds ≤ 2·⌈log_k N⌉ + 1, and no server sends more than k + 2 messages per
//! collective on a k-ary tree. The dissemination allgather is held to a binomial
//! tree's bounds: rounds of radix 2, and ⌈log2 N⌉ + 2 messages (a binomial root's
//! fan-out plus 2). Issue 4's target is checked here too: the simulated group construct
//! at N = 16384 within 2× of the allgather lower bound with HDR-like parameters.

use cohort_sim::{
    ceil_log, lower_bound, simulate, simulate_model, Collective, Params, Report, Scenario,
};
use cohort_topology::{Allgather, TreeShape};

fn assert_bounds(r: &Report, n: u32, k: u32, what: &str) {
    assert_bounds_with(r, n, k, k, what)
}

/// Rounds against `2·⌈log_k N⌉ + 1`, messages against `fan_out + 2`.
fn assert_bounds_with(r: &Report, n: u32, k: u32, fan_out: u32, what: &str) {
    let k_msgs = fan_out;
    let rounds = 2 * ceil_log(n, k) + 1;
    assert!(
        r.rounds <= rounds,
        "{what}: {} rounds > 2·⌈log_{k} {n}⌉ + 1 = {rounds}",
        r.rounds
    );
    let (worst, msgs) = r
        .msgs_sent
        .iter()
        .enumerate()
        .max_by_key(|&(_, m)| *m)
        .map(|(i, &m)| (i, m))
        .unwrap_or((0, 0));
    assert!(
        msgs <= u64::from(k_msgs) + 2,
        "{what}: server {worst} sent {msgs} messages > k + 2 = {}",
        k_msgs + 2
    );
    if n > 1 {
        assert!(
            r.rounds >= 2,
            "{what}: a gather and a broadcast take 2+ rounds"
        );
    }
}

#[test]
fn engines_stay_within_the_round_and_message_bounds() {
    for op in [Collective::Construct, Collective::Fence] {
        for n in [1, 2, 3, 4, 5, 9, 16, 17, 31, 64, 100, 200] {
            for k in [2u32, 3, 4, 8] {
                let mut s = Scenario::new(n, op, TreeShape::KAry(k as usize));
                s.bytes_per_rank = 256;
                let r = simulate(&s, Params::hdr()).expect("simulation");
                assert_bounds(&r, n, k, &format!("{op} over {n} servers, {k}-ary"));
                assert_eq!(r.results.len(), n as usize, "every rank got a reply");
            }
        }
    }
}

#[test]
fn several_ranks_per_server_do_not_add_messages() {
    for n in [3, 10, 40] {
        let mut s = Scenario::new(n, Collective::Construct, TreeShape::KAry(2));
        s.ranks_per_node = 4;
        let r = simulate(&s, Params::hdr()).expect("simulation");
        assert_bounds(&r, n, 2, &format!("construct over {n} servers × 4 ranks"));
    }
}

#[test]
fn the_schedule_model_stays_within_the_bounds_up_to_16384_servers() {
    for n in [1024, 4096, 16384] {
        for k in [2u32, 4, 16] {
            let s = Scenario::new(n, Collective::Construct, TreeShape::KAry(k as usize));
            let r = simulate_model(&s, Params::hdr()).expect("model");
            assert_bounds(
                &r,
                n,
                k,
                &format!("model construct over {n} servers, {k}-ary"),
            );
        }
    }
}

#[test]
fn the_dissemination_allgather_stays_within_the_binomial_bounds() {
    for op in [Collective::Construct, Collective::Fence] {
        for n in [2, 3, 4, 5, 9, 16, 17, 31, 64, 100, 200] {
            for rpn in [1, 3] {
                let mut s = Scenario::new(n, op, TreeShape::KAry(4));
                s.allgather = Allgather::Dissemination;
                s.ranks_per_node = rpn;
                s.bytes_per_rank = 256;
                let r = simulate(&s, Params::hdr()).expect("simulation");
                let what = format!("{op} over {n} servers × {rpn}, dissemination");
                assert_bounds_with(&r, n, 2, ceil_log(n, 2), &what);
                assert_eq!(
                    r.results.len(),
                    (n * rpn) as usize,
                    "{what}: every rank replied"
                );
            }
        }
    }
    for n in [1024, 4096, 16384] {
        let mut s = Scenario::new(n, Collective::Construct, TreeShape::KAry(2));
        s.allgather = Allgather::Dissemination;
        let r = simulate_model(&s, Params::hdr()).expect("model");
        let what = format!("model construct over {n} servers, dissemination");
        assert_bounds_with(&r, n, 2, ceil_log(n, 2), &what);
    }
}

/// Issue 4's target: with 1 KiB per server the allgather moves 16 MiB at N = 16384, so
/// the bound is almost all bandwidth; a tree sends the whole result down every level,
/// the dissemination allgather takes in each byte once.
#[test]
fn a_16384_server_construct_is_within_2x_of_the_lower_bound() {
    let p = Params::hdr();
    let n = 16384;
    assert!(
        Allgather::Auto.disseminates(n as usize),
        "cohortd's default picks the dissemination allgather at this size"
    );
    let mut s = Scenario::new(n, Collective::Construct, TreeShape::KAry(2));
    s.allgather = Allgather::Auto;
    let r = simulate_model(&s, p).expect("model");
    let bound = lower_bound(n, 1024.0, &p);
    let ratio = r.completion_s / bound;
    assert!(
        ratio <= 2.0,
        "construct over {n} servers: {:.1} us is {ratio:.2}× the bound {:.1} us",
        r.completion_s * 1e6,
        bound * 1e6
    );
}
