//! The simulator runs the node servers' own state machines: for small jobs, a real
//! `cohort run` job and `cohort-sim`'s simulation of the same job must give every rank
//! the same membership, context id, group info and data (issue 4: "for small N the
//! simulated and the real node servers produce identical membership, context ids and
//! data"). The job is the `sim-compare` scenario of the test rank program; both sides
//! print `cohort_proto::digest::group_view_line` per rank.

use cohort_cluster_tests::{example, run_cohort, text, DEADLINE};
use cohort_proto::digest::COMPARE_GROUP;
use cohort_sim::{compare_lines, simulate, Collective, Params, Scenario};
use cohort_topology::Allgather;

/// Runs the real job (its node servers gathering by `allgather`); returns its
/// namespace and the ranks' digest lines, sorted.
fn real(nodes: u32, ranks: u32, allgather: Allgather) -> (String, Vec<String>) {
    let prog = example("testprog");
    let (nodes_s, ranks_s, alg) = (nodes.to_string(), ranks.to_string(), allgather.to_string());
    let out = run_cohort(
        [
            "run".as_ref(),
            "--nodes".as_ref(),
            nodes_s.as_ref(),
            "-n".as_ref(),
            ranks_s.as_ref(),
            "--allgather".as_ref(),
            alg.as_ref(),
            "--tag-output".as_ref(),
            prog.as_os_str(),
            "sim-compare".as_ref(),
        ],
        DEADLINE,
    );
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "real job failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    let mut nspace = None;
    let mut lines = Vec::new();
    for l in stdout.lines() {
        // [nspace,rank]<stdout>: SIM rank …
        let Some((tag, line)) = l.split_once("SIM ") else {
            continue;
        };
        let ns = tag
            .trim_start_matches('[')
            .split(',')
            .next()
            .expect("tagged line")
            .to_string();
        assert!(
            nspace.get_or_insert_with(|| ns.clone()) == &ns,
            "one namespace"
        );
        lines.push(line.to_string());
    }
    assert_eq!(lines.len(), ranks as usize, "one line per rank:\n{stdout}");
    lines.sort();
    (nspace.expect("a namespace"), lines)
}

fn simulated(nodes: u32, ranks: u32, nspace: &str, allgather: Allgather) -> Vec<String> {
    // The shape every cohortd of a job of this size uses.
    let shape = cohort_topology::default_shape(nodes as usize);
    let mut s = Scenario::new(nodes, Collective::Construct, shape);
    s.allgather = allgather;
    s.ranks_per_node = ranks / nodes;
    s.nspace = nspace.to_string();
    s.group_id = COMPARE_GROUP.to_string();
    s.bytes_per_rank = 64;
    s.read_back = true;
    let report = simulate(&s, Params::hdr()).expect("simulation");
    let mut lines = compare_lines(&report.results);
    lines.sort();
    lines
}

fn compare(nodes: u32, ranks: u32) {
    compare_with(nodes, ranks, Allgather::Auto)
}

fn compare_with(nodes: u32, ranks: u32, allgather: Allgather) {
    let (nspace, real) = real(nodes, ranks, allgather);
    let sim = simulated(nodes, ranks, &nspace, allgather);
    assert_eq!(
        real, sim,
        "real (left) and simulated (right) results differ"
    );
    // The comparison is not vacuous: every rank saw every member's data and info.
    for l in &real {
        assert!(l.contains(" ctx 0x"), "no context id in {l}");
        assert_eq!(l.matches("64B#").count(), ranks as usize, "data in {l}");
    }
}

#[test]
fn simulated_and_real_node_servers_agree_on_three_nodes() {
    compare(3, 6);
}

#[test]
fn simulated_and_real_node_servers_agree_on_one_and_four_nodes() {
    compare(1, 3);
    compare(4, 4);
}

#[test]
fn simulated_and_real_node_servers_agree_with_the_dissemination_allgather() {
    compare_with(3, 6, Allgather::Dissemination);
    compare_with(5, 5, Allgather::Dissemination);
}
