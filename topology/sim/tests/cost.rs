//! `cohort-sim cost` (a node server's steady-state CPU per message) must time every
//! message of the benchmark loop it stands for, on engines that keep completing the
//! operation iteration after iteration.

use cohort_sim::{measure_steady, Collective};

/// 3 servers, one rank each, a binary tree rooted at server 0. A fence with data: 3
/// commits and 3 fence requests, 2 contributions up and 2 outcomes down (10); its
/// barrier: 3 requests, 2 up, 2 down (7).
#[test]
fn a_fence_iteration_is_seventeen_messages() {
    let c = measure_steady(3, 1, Collective::Fence, 1024, 50, 5).expect("50 fences complete");
    assert_eq!(c.iterations, 50);
    assert_eq!(c.steps_per_iteration, 17.0);
    assert!(c.median_step > std::time::Duration::ZERO);
}

/// A construct with a context id (3 commits, 3 requests, 2 up, 2 down), its destruct
/// (3 requests, 2 up, 2 down) and the barrier (7): 24 messages, and every reply a
/// success (a stale group or a reused id would fail the second iteration on).
#[test]
fn a_construct_iteration_is_twenty_four_messages() {
    let c =
        measure_steady(3, 1, Collective::Construct, 1024, 50, 5).expect("50 constructs complete");
    assert_eq!(c.steps_per_iteration, 24.0);
}

/// γ, the step time's growth per byte taken in: a step that takes in an outcome with
/// 16 servers' kilobyte each decodes and stores far more than one that takes in a
/// request, so the fitted slope is positive.
#[test]
fn steps_that_take_in_more_bytes_cost_more() {
    let c = measure_steady(16, 1, Collective::Fence, 1024, 40, 4).expect("40 fences complete");
    assert!(c.per_byte_s > 0.0, "γ = {} s/B", c.per_byte_s);
    assert!(c.per_byte_s.is_finite());
}
