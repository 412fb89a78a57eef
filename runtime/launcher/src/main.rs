//! `cohort`: the launcher binary.

use clap::Parser;
use cohort_launcher::cli::{normalize_args, Cli, Command};

fn main() {
    cohort_os::init_tracing();
    cohort_os::raise_fd_limit();
    let cli = Cli::parse_from(normalize_args(std::env::args_os()));
    let code = match cli.command {
        Command::Run(args) => cohort_launcher::launch::run(*args),
        Command::Topo(args) => cohort_launcher::topo::run(&args),
    };
    std::process::exit(code);
}
