//! The schedule model (used past the sizes whose engines fit in memory) must agree
//! exactly with the simulator running the real engines, wherever both run: completion
//! time, rounds, and messages and bytes sent by every server.

use cohort_sim::{simulate, simulate_model, Collective, Params, Scenario};
use cohort_topology::{Allgather, TreeShape};

fn check(nodes: u32, ranks_per_node: u32, shape: TreeShape, bytes: usize, p: Params) {
    check_with(nodes, ranks_per_node, shape, Allgather::Tree, bytes, p)
}

fn check_with(
    nodes: u32,
    ranks_per_node: u32,
    shape: TreeShape,
    allgather: Allgather,
    bytes: usize,
    p: Params,
) {
    let mut s = Scenario::new(nodes, Collective::Construct, shape);
    s.allgather = allgather;
    s.ranks_per_node = ranks_per_node;
    s.bytes_per_rank = bytes;
    let engine = simulate(&s, p).expect("engine run");
    let model = simulate_model(&s, p).expect("model run");
    let what =
        format!("{nodes} servers × {ranks_per_node} ranks, {shape} tree, {allgather}, {bytes} B");
    assert_eq!(
        engine.msgs_sent, model.msgs_sent,
        "messages per server, {what}"
    );
    assert_eq!(
        engine.bytes_sent, model.bytes_sent,
        "bytes per server, {what}"
    );
    assert_eq!(engine.rounds, model.rounds, "rounds, {what}");
    assert_eq!(
        engine.completion_s, model.completion_s,
        "completion time, {what}"
    );
}

/// Slow links, costly messages, slow rank hops.
fn slow_links() -> Params {
    Params {
        alpha_s: 25e-6,
        beta_s_per_byte: 1.0 / 2e9,
        overhead_s: 4e-6,
        overhead_s_per_byte: 0.0,
        client_alpha_s: 8e-6,
        host_cores: None,
    }
}

#[test]
fn model_matches_the_engines_on_k_ary_and_binomial_trees() {
    let hdr = Params::hdr();
    for nodes in [1, 2, 3, 5, 8, 13, 40, 100] {
        for shape in [TreeShape::KAry(2), TreeShape::KAry(4), TreeShape::Binomial] {
            check(nodes, 1, shape, 1024, hdr);
        }
    }
}

#[test]
fn model_matches_the_engines_with_several_ranks_per_server_and_slow_links() {
    let slow = slow_links();
    for nodes in [3, 7, 30] {
        for rpn in [2, 3] {
            check(nodes, rpn, TreeShape::KAry(3), 300, slow);
            check(nodes, rpn, TreeShape::Binomial, 0, slow);
        }
    }
}

#[test]
fn model_matches_the_engines_on_a_shared_host() {
    let host = Params {
        alpha_s: 30e-6,
        beta_s_per_byte: 1.0 / 2.5e9,
        overhead_s: 4e-6,
        overhead_s_per_byte: 0.0,
        client_alpha_s: 20e-6,
        host_cores: Some(2),
    };
    for nodes in [1, 2, 3, 6, 20] {
        for rpn in [1, 2] {
            check(nodes, rpn, TreeShape::KAry(2), 1024, host);
            check(nodes, rpn, TreeShape::Binomial, 64, host);
        }
    }
}

#[test]
fn model_matches_the_engines_with_the_dissemination_allgather() {
    let slow = slow_links();
    let host = Params {
        host_cores: Some(2),
        ..slow
    };
    for nodes in [2, 3, 5, 8, 13, 40, 100] {
        check_with(
            nodes,
            1,
            TreeShape::KAry(4),
            Allgather::Dissemination,
            1024,
            Params::hdr(),
        );
    }
    for nodes in [3, 7, 30] {
        for rpn in [2, 3] {
            check_with(
                nodes,
                rpn,
                TreeShape::KAry(3),
                Allgather::Dissemination,
                300,
                slow,
            );
        }
    }
    for nodes in [2, 6, 20] {
        check_with(
            nodes,
            2,
            TreeShape::Binomial,
            Allgather::Dissemination,
            64,
            host,
        );
    }
}

/// γ (a server's CPU per byte of a message it takes in) is charged alike by the engines'
/// simulation and the schedule model, and it slows a collective down by at least what
/// taking in its largest message costs.
#[test]
fn the_per_byte_cost_is_charged_alike_and_slows_the_collective() {
    let slow = slow_links();
    let gamma = Params {
        overhead_s_per_byte: 1e-9,
        ..slow
    };
    for nodes in [3, 8, 20] {
        check(nodes, 1, TreeShape::KAry(2), 4096, gamma);
    }
    let mut s = Scenario::new(16, Collective::Construct, TreeShape::KAry(2));
    s.bytes_per_rank = 4096;
    let without = simulate(&s, slow).expect("engine run").completion_s;
    let with = simulate(&s, gamma).expect("engine run").completion_s;
    // The outcome a leaf takes in carries all 16 servers' 4 KiB.
    let outcome_take_in = 16.0 * 4096.0 * 1e-9;
    assert!(
        with - without >= outcome_take_in,
        "with γ {with} s, without {without} s"
    );
}
