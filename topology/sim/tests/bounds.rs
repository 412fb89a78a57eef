//! Issue 4's structural bounds on the node servers' collectives, checked by running
//! the real engines in the simulator (and the schedule model up to 16384 servers):
//! rounds ≤ 2·⌈log_k N⌉ + 1, and no server sends more than k + 2 messages per
//! collective on a k-ary tree.

use cohort_sim::{ceil_log, simulate, simulate_model, Collective, Params, Report, Scenario};
use cohort_topology::TreeShape;

fn assert_bounds(r: &Report, n: u32, k: u32, what: &str) {
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
        msgs <= u64::from(k) + 2,
        "{what}: server {worst} sent {msgs} messages > k + 2 = {}",
        k + 2
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
