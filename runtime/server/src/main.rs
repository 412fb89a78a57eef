//! `cohortd`, the per-node server: the process shell (launcher control channel, rank
//! processes, stdio forwarding, signals) around the node service of `cohort_server`.
//! Started by `cohort run`; see `cohortd --help`.

mod shell;

/// mimalloc rather than glibc's malloc: a node server allocates and frees a few small
/// buffers per message, and with glibc that was about a quarter of its CPU per message
/// (`cohort-sim cost`: 34 → 24 µs of server CPU per 3-server fence and barrier).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(shell::main());
}
