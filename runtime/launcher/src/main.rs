//! `cohort`: the launcher binary.

use clap::Parser;
use cohort_launcher::cli::{normalize_args, Cli, Command};
use tracing_subscriber::EnvFilter;

fn main() {
    init_tracing();
    let cli = Cli::parse_from(normalize_args(std::env::args_os()));
    let code = match cli.command {
        Command::Run(args) => cohort_launcher::launch::run(args),
    };
    std::process::exit(code);
}

/// Logs go to stderr, filtered by `COHORT_LOG`, else `RUST_LOG`, else `warn`.
fn init_tracing() {
    let filter = EnvFilter::try_from_env(cohort_proto::env::LOG)
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
