//! `cohortd`, the per-node server: the process shell (launcher control channel, rank
//! processes, stdio forwarding, signals) around the node service of `cohort_server`.
//! Started by `cohort run`; see `cohortd --help`.

mod shell;

fn main() {
    std::process::exit(shell::main());
}
