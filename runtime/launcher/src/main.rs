//! `cohort`: the launcher binary.

use cohort_launcher::cli::{parse_cli, Command};

fn main() {
    cohort_os::init_tracing();
    cohort_os::raise_fd_limit();
    let cli = parse_cli(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let code = match cli.command {
        Command::Run(args) => cohort_launcher::launch::run(*args),
        Command::Topo(args) => cohort_launcher::topo::run(&args),
    };
    std::process::exit(code);
}
