//! The radix the node servers' cost model picks (`cohort_topology::CostModel`) must be
//! close to the best shape for the engines as the simulator runs them: within 30% of
//! the fastest of k-ary 2…8 and binomial, for HDR-like and TCP-like parameters.
//! (Worst today: HDR at N = 8, binomial picked, 1.27× the 6-ary tree — the cost model
//! charges `o` for every message a parent sends, the simulator only for those it
//! takes in.)

use cohort_sim::{simulate_model, Collective, Params, Scenario};
use cohort_topology::{CostModel, TreeShape};

fn time(n: u32, shape: TreeShape, p: Params) -> f64 {
    let s = Scenario::new(n, Collective::Construct, shape);
    simulate_model(&s, p).expect("model run").completion_s
}

#[test]
fn the_cost_models_pick_is_near_the_simulated_best() {
    let tcp = Params {
        alpha_s: 30e-6,
        beta_s_per_byte: 1.0 / 2.5e9,
        overhead_s: 4e-6,
        overhead_s_per_byte: 0.0,
        client_alpha_s: 20e-6,
        host_cores: None,
    };
    for (name, p) in [("hdr", Params::hdr()), ("tcp", tcp)] {
        for n in [4u32, 8, 16, 64, 256, 1024, 4096] {
            let picked = CostModel {
                alpha_s: p.alpha_s,
                beta_s_per_byte: p.beta_s_per_byte,
                overhead_s: p.overhead_s,
                bytes_per_node: 1024.0,
            }
            .best_shape(n as usize);
            let best = (2..=8)
                .map(TreeShape::KAry)
                .chain([TreeShape::Binomial])
                .map(|s| (time(n, s, p), s))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .expect("shapes");
            let got = time(n, picked, p);
            assert!(
                got <= best.0 * 1.3,
                "{name}, N = {n}: the cost model picks {picked} ({:.1} us), {} takes {:.1} us",
                got * 1e6,
                best.1,
                best.0 * 1e6
            );
        }
    }
}
