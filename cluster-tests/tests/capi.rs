//! The C interface (`runtime/capi/include/cohort.h`, `libcohort_c`) from a C program:
//! `cluster-tests/c/capi_demo.c` is compiled against the header and the shared
//! library with the system C compiler (`cc`, which `make setup` installs) and run under
//! `cohort run` on 1 and on 3 node servers (with a process set of the even ranks); its
//! rank 0 spawns 2 copies of it (`cohort_spawn`, `cohort_spawn_nb`), which find their
//! parent (`cohort_parent`) and connect with the launched job. The
//! ranks check every answer themselves
//! (wrong structure layouts or codes show as wrong values) and print `FAIL` on a
//! violation; here the job must succeed and every rank that stays in the group must
//! report the same group.

use std::path::{Path, PathBuf};
use std::process::Command;

use cohort_cluster_tests::{run_cohort, target_dir, text, DEADLINE};

/// Builds `capi_demo` once per test binary, into the target directory.
fn demo() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target = target_dir();
            if !target.join("libcohort_c.so").exists() {
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                let mut cmd = Command::new(cargo);
                cmd.args(["build", "-p", "cohort-capi"]);
                if let Some(root) = target.parent() {
                    cmd.env("CARGO_TARGET_DIR", root);
                }
                let _ = cmd.status();
            }
            assert!(
                target.join("libcohort_c.so").exists(),
                "{} is missing; run `cargo build --workspace` first",
                target.join("libcohort_c.so").display()
            );
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let out = target.join("capi_demo");
            let cc = Command::new("cc")
                .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
                .arg(&out)
                .arg(root.join("c/capi_demo.c"))
                .arg("-I")
                .arg(root.join("../runtime/capi/include"))
                .arg("-L")
                .arg(&target)
                .arg(format!("-Wl,-rpath,{}", target.display()))
                .arg("-lcohort_c")
                .output()
                .expect("the C compiler `cc` runs (make setup installs build-essential)");
            assert!(
                cc.status.success(),
                "cc failed:\n{}{}",
                text(&cc.stdout),
                text(&cc.stderr)
            );
            out
        })
        .clone()
}

fn run(nodes: u32, n: u32) {
    let prog = demo();
    let (nodes_s, n_s) = (nodes.to_string(), n.to_string());
    let evens: Vec<String> = (0..n).step_by(2).map(|r| r.to_string()).collect();
    let pset = format!("evens={}", evens.join(","));
    let out = run_cohort(
        [
            "run",
            "--nodes",
            &nodes_s,
            "--pset",
            &pset,
            "-n",
            &n_s,
            prog.to_str().expect("a UTF-8 path"),
        ],
        DEADLINE,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let context =
        format!("on {nodes} node server(s)\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}");
    assert_eq!(out.status.code(), Some(0), "{context}");
    assert!(!stderr.contains("FAIL rank"), "{context}");
    let results: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .collect();
    assert_eq!(
        results.len() as u32,
        n - 1,
        "one RESULT per remaining member {context}"
    );
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "ranks disagree: {results:?}"
    );
    let expect = format!("RESULT members={n} ctx=");
    assert!(
        results[0].starts_with(&expect)
            && results[0].contains(" failed=0 conn=")
            && results[0].ends_with(" spawned=2"),
        "{context}"
    );
    let children: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("SPAWNED "))
        .collect();
    assert_eq!(
        children, ["SPAWNED size=2 parent=0 ep=ep-0"; 2],
        "one SPAWNED per child: {context}"
    );
}

#[test]
fn a_c_program_exchanges_data_and_builds_groups_on_one_node_server() {
    run(1, 4);
}

#[test]
fn a_c_program_exchanges_data_and_builds_groups_on_three_node_servers() {
    run(3, 6);
}
