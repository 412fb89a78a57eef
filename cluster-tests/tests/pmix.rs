//! cohort's PMIx-ABI library (`runtime/pmix`, `libpmix.so.2`) from unmodified PMIx
//! programs:
//!
//! * `cluster-tests/c/pmix_demo.c`, written against OpenPMIx's `<pmix.h>`, compiled
//!   with `cc` and linked against `libpmix.so.2`, runs under `cohort run` with cohort's
//!   library first on `LD_LIBRARY_PATH` (checked with `ldd`, and by the program, which
//!   requires `PMIx_Get_version` to be cohort's): job keys, bad arguments, peers and
//!   nodes, put/commit/fence/get (and `_nb`) of other ranks' data, events, a group
//!   with a context id and a query of it, a process set, an invitation joined from an
//!   event handler, a non-blocking construct, connect and disconnect.
//! * `cluster-tests/c/mpi_demo.c`, built with Debian's Open MPI 4.1 `mpicc`, runs under
//!   `cohort run` the same way (Open MPI's `ext3x` PMIx component loads cohort's
//!   library): MPI_Init, MPI_Comm_rank/size, MPI_Allgather, MPI_Barrier, MPI_Finalize.
//!
//! Both on 1 node server and on 3. The tools (`cc`, `libpmix-dev`, `mpicc`; `make
//! setup` installs them) missing skips a test, except under `CI=true`, where it fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use cohort_cluster_tests::{
    cohort_command, example, pmix_include, run_cohort, target_dir, text, tool_missing, CohortRun,
    DEADLINE,
};

/// A directory holding only cohort's library under its soname, `libpmix.so.2` (a
/// link to `target/<profile>/libpmix.so`, built on demand).
fn pmix_lib_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let target = target_dir();
        let lib = target.join("libpmix.so");
        if !lib.exists() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-p", "cohort-pmix"]);
            if let Some(root) = target.parent() {
                cmd.env("CARGO_TARGET_DIR", root);
            }
            let _ = cmd.status();
        }
        assert!(
            lib.exists(),
            "{} is missing; run `cargo build -p cohort-pmix` (or `make pmix`) first",
            lib.display()
        );
        let dir = target.join("cohort-pmix");
        std::fs::create_dir_all(&dir).expect("cannot create the library directory");
        let link = dir.join("libpmix.so.2");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).expect("cannot link libpmix.so.2");
        dir
    })
    .clone()
}

/// `ldd prog` with `dir` first on the library path resolves `libpmix.so.2` there.
fn assert_loads_ours(prog: &Path, dir: &Path) {
    let out = Command::new("ldd")
        .arg(prog)
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .expect("ldd runs");
    let listing = text(&out.stdout);
    let line = listing
        .lines()
        .find(|l| l.contains("libpmix.so.2"))
        .unwrap_or_else(|| panic!("{} does not load libpmix.so.2:\n{listing}", prog.display()));
    assert!(
        line.contains(&dir.join("libpmix.so.2").display().to_string()),
        "libpmix.so.2 resolves elsewhere than {}: {line}",
        dir.display()
    );
}

/// Builds C program `c/NAME.c` against the system `<pmix.h>` and cohort's library
/// once, or `None` when the tools are missing (and not in CI).
fn pmix_program(name: &'static str) -> Option<PathBuf> {
    static BUILT: Mutex<BTreeMap<&str, Option<PathBuf>>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built
        .entry(name)
        .or_insert_with(|| {
            let Some(include) = pmix_include() else {
                tool_missing("pmix.h (libpmix-dev)");
                return None;
            };
            let dir = pmix_lib_dir();
            let out = target_dir().join(name);
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let Ok(cc) = Command::new("cc")
                .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o"])
                .arg(&out)
                .arg(root.join(format!("c/{name}.c")))
                .arg("-I")
                .arg(&include)
                .arg("-L")
                .arg(&dir)
                .arg("-l:libpmix.so.2")
                // pmix_demo.c checks the topology the node server serves (hwloc.h:
                // libhwloc-dev, which `make setup` installs).
                .arg("-lhwloc")
                .output()
            else {
                tool_missing("the C compiler `cc`");
                return None;
            };
            assert!(
                cc.status.success(),
                "cc failed:\n{}{}",
                text(&cc.stdout),
                text(&cc.stderr)
            );
            assert_loads_ours(&out, &dir);
            Some(out)
        })
        .clone()
}

/// How the ranks get cohort's library first on their library path.
#[derive(Clone, Copy)]
enum Lib {
    /// `-x LD_LIBRARY_PATH=<its directory>`, by hand.
    Exported,
    /// `cohort run --pmix`, which also tells Open MPI that cohort started its
    /// processes.
    PmixFlag,
}

/// Runs `prog` on `nodes` node servers with `n` ranks, a process set `evens` of the
/// even ranks and cohort's library first on the library path (plus `env`), and
/// returns the RESULT lines after checking the job succeeded with one per rank, all
/// equal.
fn run(prog: &Path, nodes: u32, n: u32, lib: Lib, env: &[&str]) -> Vec<String> {
    run_with(prog, nodes, n, lib, env, (&[], &[]))
}

/// [`run`] with more launcher options (`opts`) and program arguments (`args`).
fn run_with(
    prog: &Path,
    nodes: u32,
    n: u32,
    lib: Lib,
    env: &[&str],
    (opts, prog_args): (&[&str], &[&str]),
) -> Vec<String> {
    let (nodes_s, n_s) = (nodes.to_string(), n.to_string());
    let libpath = format!("LD_LIBRARY_PATH={}", pmix_lib_dir().display());
    let evens: Vec<String> = (0..n).step_by(2).map(|r| r.to_string()).collect();
    let pset = format!("evens={}", evens.join(","));
    let mut args = vec!["run", "--nodes", &nodes_s, "--pset", &pset, "-n", &n_s];
    match lib {
        Lib::Exported => args.extend(["-x", &libpath]),
        // The launcher finds it in cohort-pmix/ next to itself, where
        // `pmix_lib_dir` made it.
        Lib::PmixFlag => args.push("--pmix"),
    }
    for e in env {
        args.extend(["-x", e]);
    }
    args.extend(opts);
    args.push(prog.to_str().expect("a UTF-8 path"));
    args.extend(prog_args);
    let out = run_cohort(&args, DEADLINE);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let context = format!(
        "{} on {nodes} node server(s), {n} ranks\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}",
        prog.display()
    );
    assert_eq!(out.status.code(), Some(0), "{context}");
    assert!(!stderr.contains("FAIL rank"), "{context}");
    let results: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .map(str::to_string)
        .collect();
    assert_eq!(results.len() as u32, n, "one RESULT per rank: {context}");
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "ranks disagree: {results:?}"
    );
    results
}

/// PMIx event handler chains from C (`c/pmix_chain.c`): the next handler gets an
/// event only once the previous one called its completion callback, here from
/// another thread after it returned; PMIX_EVENT_ACTION_COMPLETE given late ends the
/// chain; a handler that never calls it holds only its own event.
#[test]
fn a_pmix_handler_that_answers_later_holds_its_chain() {
    let Some(prog) = pmix_program("pmix_chain") else {
        return;
    };
    let results = run(&prog, 1, 2, Lib::Exported, &[]);
    assert_eq!(results[0], "RESULT chain ok");
}

fn run_pmix_demo(nodes: u32, n: u32) {
    let Some(prog) = pmix_program("pmix_demo") else {
        return;
    };
    let results = run(&prog, nodes, n, Lib::Exported, &[]);
    let expect = format!("RESULT size={n} nodes={nodes} members={n} ctx=");
    assert!(results[0].starts_with(&expect), "{results:?}");
}

#[test]
fn a_pmix_program_runs_on_cohorts_libpmix_on_one_node_server() {
    run_pmix_demo(1, 4);
}

#[test]
fn a_pmix_program_runs_on_cohorts_libpmix_on_three_node_servers() {
    run_pmix_demo(3, 6);
}

/// Builds `c/NAME.c` with Open MPI's `mpicc` once, or `None` when it is missing (and
/// not in CI).
fn mpi_program(name: &'static str) -> Option<PathBuf> {
    static BUILT: Mutex<BTreeMap<&str, Option<PathBuf>>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built
        .entry(name)
        .or_insert_with(|| {
            let out = target_dir().join(name);
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let Ok(cc) = Command::new("mpicc")
                .args(["-Wall", "-Werror", "-o"])
                .arg(&out)
                .arg(root.join(format!("c/{name}.c")))
                // mpi_split.c checks Open MPI's communicators against hwloc's view.
                .arg("-lhwloc")
                .output()
            else {
                tool_missing("Open MPI's `mpicc` (libopenmpi-dev, openmpi-bin)");
                return None;
            };
            assert!(
                cc.status.success(),
                "mpicc failed:\n{}{}",
                text(&cc.stdout),
                text(&cc.stderr)
            );
            // Open MPI's PMIx component, not the program, links libpmix.so.2.
            let component = Command::new("sh")
                .args(["-c", "ls /usr/lib/*/openmpi/lib/openmpi3/mca_pmix_ext3x.so"])
                .output()
                .ok()
                .map(|o| text(&o.stdout).trim().to_string())
                .filter(|p| !p.is_empty());
            if let Some(c) = component {
                assert_loads_ours(Path::new(&c), &pmix_lib_dir());
            }
            Some(out)
        })
        .clone()
}

/// What an Open MPI 4.1 program needs under `cohort run` (see the README), by hand:
/// its ORTE "schizo" component would otherwise declare a process that mpirun did not
/// start a singleton; and node servers emulated on one host share it, so the
/// shared-memory transport (whose segment names assume one node per host) must give
/// way to TCP over loopback. `--pmix` sets both.
const MPI_ENV_EMULATED_NODES: &[&str] = &[
    "OMPI_MCA_schizo=^orte",
    "OMPI_MCA_btl=self,tcp",
    "OMPI_MCA_btl_tcp_if_include=lo",
];

fn run_mpi_demo(nodes: u32, n: u32, lib: Lib) {
    let Some(prog) = mpi_program("mpi_demo") else {
        return;
    };
    let results = match lib {
        Lib::Exported => run(&prog, nodes, n, lib, MPI_ENV_EMULATED_NODES),
        Lib::PmixFlag => run(&prog, nodes, n, lib, &[]),
    };
    let sum: u32 = (0..n).map(|r| 1000 + r * 7).sum();
    assert_eq!(results[0], format!("RESULT size={n} sum={sum}"));
}

#[test]
fn an_open_mpi_program_runs_on_cohorts_libpmix_on_one_node_server() {
    run_mpi_demo(1, 4, Lib::PmixFlag);
}

#[test]
fn an_open_mpi_program_runs_on_cohorts_libpmix_on_three_node_servers() {
    run_mpi_demo(3, 6, Lib::PmixFlag);
}

/// Open MPI loads the host's topology its node server serves (`pmix.hwlocxml2`)
/// instead of discovering the host in every process (tens of milliseconds of each
/// MPI_Init here). Its own log says which it did.
#[test]
fn open_mpi_loads_the_topology_its_node_server_serves() {
    let Some(prog) = mpi_program("mpi_demo") else {
        return;
    };
    let args = [
        "run",
        "--nodes",
        "2",
        "-n",
        "4",
        "--pmix",
        "-x",
        "OMPI_MCA_hwloc_base_verbose=1",
        prog.to_str().expect("a UTF-8 path"),
    ];
    let out = run_cohort(args, DEADLINE);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let context = format!("--- stdout:\n{stdout}\n--- stderr:\n{stderr}");
    assert_eq!(out.status.code(), Some(0), "{context}");
    let said = |what: &str| format!("{stdout}{stderr}").matches(what).count();
    assert_eq!(
        (
            said("hwloc:base loading topology from XML"),
            said("hwloc:base discovering topology")
        ),
        (4, 0),
        "every rank loads the served topology, none discovers the host: {context}"
    );
}

/// PMIX_CPUSET and PMIX_LOCALITY_STRING of bound processes, and
/// PMIx_Get_relative_locality of two of them, agree with hwloc's view of the host
/// (`c/pmix_locality.c` checks every pair); unbound processes have neither.
#[test]
fn a_pmix_program_learns_where_its_bound_peers_sit() {
    let Some(prog) = pmix_program("pmix_locality") else {
        return;
    };
    let bound = run_with(
        &prog,
        1,
        2,
        Lib::Exported,
        &[],
        (&["--bind-to", "core"], &["bound"]),
    );
    // Two cores of one package here: they share at least the node and the package.
    let shared = bound[0]
        .strip_prefix("RESULT size=2 bound=1 shared=0x")
        .and_then(|h| u16::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| panic!("{bound:?}"));
    assert_eq!(shared & 0x4000, 0x4000, "{bound:?}");
    let unbound = run_with(
        &prog,
        1,
        2,
        Lib::Exported,
        &[],
        (&["--bind-to", "none"], &["unbound"]),
    );
    assert_eq!(unbound[0], "RESULT size=2 bound=0 shared=0");
}

/// PMIX_GROUP_FT_COLLECTIVE and PMIX_GROUP_OPTIONAL from C (`c/pmix_ft.c`): with
/// rank 2 gone (finalized and exited), a fence and a destruct that tolerate it
/// succeed without it and a fence that does not fails with PMIX_PROC_TERMINATED; an
/// optional construct returns PMIX_ERR_PARTIAL_SUCCESS and a fault-tolerant one
/// PMIX_SUCCESS, both with the 2 survivors.
fn run_pmix_ft(nodes: u32) {
    let Some(prog) = pmix_program("pmix_ft") else {
        return;
    };
    let out = run_cohort(
        [
            "run",
            "--nodes",
            &nodes.to_string(),
            "-n",
            "3",
            "-x",
            &format!("LD_LIBRARY_PATH={}", pmix_lib_dir().display()),
            prog.to_str().expect("a UTF-8 path"),
        ],
        DEADLINE,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let results: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .collect();
    let line = "RESULT ft fence=ok strict_fence=terminated optional=partial ft_construct=2 \
                ft_destruct=ok";
    assert_eq!(results, [line; 2], "ranks 0 and 1: {stdout}\n{stderr}");
}

#[test]
fn a_pmix_program_goes_on_without_a_process_that_ended() {
    run_pmix_ft(3);
}

/// The same on one node server, where a fence over the job meets in shared memory:
/// once a rank terminated without arriving, the ranks take the fence to the node
/// server, which honours PMIX_GROUP_FT_COLLECTIVE.
#[test]
fn a_pmix_program_on_one_node_goes_on_without_a_process_that_ended() {
    run_pmix_ft(1);
}

/// Open MPI's locality communicators (MPI_Comm_split_type by core, cache, package,
/// NUMA node) hold the ranks whose bindings share that object, as under mpirun:
/// Open MPI reads the locality strings the node server gives (`c/mpi_split.c`
/// checks each against hwloc). Unbound, each rank is alone in them, as under
/// `mpirun --bind-to none`.
#[test]
fn open_mpi_splits_communicators_by_the_locality_cohort_gives() {
    let Some(prog) = mpi_program("mpi_split") else {
        return;
    };
    let bound = run_with(
        &prog,
        1,
        2,
        Lib::PmixFlag,
        &[],
        (&["--bind-to", "core"], &[]),
    );
    assert!(
        bound[0].starts_with("RESULT size=2 bound=1 socket="),
        "{bound:?}"
    );
    let unbound = run_with(
        &prog,
        1,
        2,
        Lib::PmixFlag,
        &[],
        (&["--bind-to", "none"], &[]),
    );
    assert_eq!(unbound[0], "RESULT size=2 bound=0 socket=1");
}

/// The same by hand (`-x` of the library path and Open MPI's settings), as on a
/// machine where `--pmix` cannot find the library.
#[test]
fn an_open_mpi_program_runs_with_the_library_exported_by_hand() {
    run_mpi_demo(3, 6, Lib::Exported);
}

/// PMIx_Publish / PMIx_Lookup / PMIx_Unpublish and their `_nb` forms from C, on 3
/// node servers (the data store is node 0's; most callers are elsewhere): a waiting
/// lookup, duplicate keys per range, partial success, the local and proc-local
/// ranges, first-read persistence, unpublish (`c/pmix_publish.c` checks each).
#[test]
fn a_pmix_program_publishes_and_looks_up_across_node_servers() {
    let Some(prog) = pmix_program("pmix_publish") else {
        return;
    };
    let results = run(&prog, 3, 6, Lib::Exported, &[]);
    assert_eq!(
        results[0],
        "RESULT size=6 waited=1 duplicate=1 partial=1 proc_local=1 local=1 \
         first_read_winners=1 republished=1"
    );
}

/// MPI_Publish_name, MPI_Lookup_name, MPI_Comm_accept and MPI_Comm_connect of Open
/// MPI 4.1 between the two halves of one job, on 3 node servers: Open MPI's connection
/// and context-id exchanges publish first-read values and wait for each other's.
#[test]
fn open_mpi_halves_of_a_job_meet_by_a_published_name_and_connect() {
    let Some(prog) = mpi_program("mpi_accept") else {
        return;
    };
    let results = run(&prog, 3, 6, Lib::PmixFlag, &[]);
    assert_eq!(results[0], "RESULT size=6 remote=3 sums=ok");
}

/// `--pmix` tells Open MPI to yield when idle (`OMPI_MCA_mpi_yield_when_idle=1`, as
/// mpirun does) to the ranks of a host with more ranks than cores, and not otherwise;
/// the user's own setting wins.
#[test]
fn pmix_makes_open_mpi_yield_on_an_oversubscribed_host_only() {
    let _ = pmix_lib_dir();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let report = "echo RESULT yield=${OMPI_MCA_mpi_yield_when_idle:-unset}";
    let job = |nodes: usize, n: usize, extra: &[&str]| {
        let (nodes, n) = (nodes.to_string(), n.to_string());
        let mut args = vec!["run", "--pmix", "--nodes", &nodes, "-n", &n];
        args.extend_from_slice(extra);
        args.extend(["sh", "-c", report]);
        let out = run_cohort(&args, DEADLINE);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
        let mut r: Vec<&str> = stdout.lines().filter(|l| l.starts_with("RESULT")).collect();
        r.dedup();
        r.join(" | ")
    };
    // More ranks than this host has CPUs (so than its cores), over two node servers.
    assert_eq!(job(2, 2 * cpus + 2, &[]), "RESULT yield=1");
    // One rank: never more than the cores.
    assert_eq!(job(1, 1, &[]), "RESULT yield=unset");
    let own = ["-x", "OMPI_MCA_mpi_yield_when_idle=0"];
    assert_eq!(job(2, 2 * cpus + 2, &own), "RESULT yield=0");
}

/// A spawn counts too: with `--pmix`, processes a spawn adds to an oversubscribed host
/// are told to yield when idle (the launched rank alone is not), unless the user said
/// otherwise.
#[test]
fn pmix_makes_spawned_open_mpi_processes_yield_on_an_oversubscribed_host() {
    let _ = pmix_lib_dir();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let np = format!("SPAWN_NP={}", 2 * cpus + 2);
    let yields = |extra: &[&str]| {
        let mut args = vec!["run", "--pmix", "-n", "1", "-x", "SPAWN_CMD=/usr/bin/env"];
        args.extend(["-x", &np]);
        args.extend_from_slice(extra);
        let testprog = example("testprog");
        let testprog = testprog.to_str().expect("a UTF-8 path");
        args.extend([testprog, "spawn-run"]);
        let out = run_cohort(&args, DEADLINE);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
        assert!(stdout.contains("RESULT spawn-run "), "{stdout}");
        let mut v: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("OMPI_MCA_mpi_yield_when_idle="))
            .collect();
        assert_eq!(
            v.len(),
            2 * cpus + 2,
            "every spawned process reports:\n{stdout}"
        );
        v.dedup();
        v.join(",")
    };
    assert_eq!(yields(&[]), "1");
    assert_eq!(yields(&["-x", "OMPI_MCA_mpi_yield_when_idle=0"]), "0");
}

/// `--pmix` without the library says where it looked and how to build it, before
/// anything starts.
#[test]
fn pmix_without_the_library_says_where_it_looked() {
    let mut cmd = cohort_command(["run", "--pmix", "-n", "1", "true"]);
    cmd.env("COHORT_PMIX_LIBDIR", "/nonexistent/cohort-pmix");
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/nonexistent/cohort-pmix") && err.contains("make pmix"),
        "{err}"
    );
}

/// Runs `prog args` (a program that spawns) on `nodes` node servers with `n` ranks
/// and cohort's library first on the library path; checks the session succeeded and
/// returns the parents' and the children's RESULT lines (each side's all equal, one
/// per process: `n` parents, `children` children).
fn run_spawner(
    prog: &Path,
    args: &[&str],
    nodes: u32,
    n: u32,
    children: u32,
    lib: Lib,
) -> (String, String) {
    let (nodes_s, n_s) = (nodes.to_string(), n.to_string());
    let libpath = format!("LD_LIBRARY_PATH={}", pmix_lib_dir().display());
    let mut cmd = vec!["run", "--nodes", &nodes_s, "-n", &n_s];
    match lib {
        Lib::Exported => cmd.extend(["-x", &libpath]),
        Lib::PmixFlag => cmd.push("--pmix"),
    }
    cmd.push(prog.to_str().expect("a UTF-8 path"));
    cmd.extend_from_slice(args);
    let out = run_cohort(&cmd, DEADLINE);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let context = format!(
        "{} {args:?} on {nodes} node server(s), {n} ranks\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}",
        prog.display()
    );
    assert_eq!(out.status.code(), Some(0), "{context}");
    assert!(!stderr.contains("FAIL rank"), "{context}");
    let side = |prefix: &str, count: u32| {
        let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with(prefix)).collect();
        assert_eq!(lines.len() as u32, count, "{prefix}: {context}");
        assert!(
            lines.windows(2).all(|w| w[0] == w[1]),
            "{prefix}: {context}"
        );
        lines[0].to_string()
    };
    (side("RESULT parent ", n), side("RESULT child ", children))
}

/// PMIx_Spawn from C (`c/pmix_spawn.c`): rank 0 of the launched job spawns 2 copies
/// of the program with an environment variable, a working directory and PMIX_MAPBY;
/// the children know they were spawned and by whom (PMIX_SPAWNED, PMIX_PARENT_ID as
/// a PMIX_PROC), their job's size, the variable and the directory; both jobs connect
/// by their wildcards, read each other's data and job-level keys, and disconnect. Bad
/// requests (no app, no process, an unknown required info) fail first.
fn run_pmix_spawn(nodes: u32, n: u32, args: &[&str]) {
    let Some(prog) = pmix_program("pmix_spawn") else {
        return;
    };
    let (parents, children) = run_spawner(&prog, args, nodes, n, 2, Lib::Exported);
    let child_sum: u32 = (0..2).map(|r| 200 + r).sum();
    let parent_sum: u32 = (0..n).map(|r| 100 + r).sum();
    assert_eq!(
        parents,
        format!("RESULT parent size={n} children=2 sum={child_sum}")
    );
    assert_eq!(
        children,
        format!("RESULT child size=2 parents={n} parent=0 sum={parent_sum}")
    );
}

#[test]
fn a_pmix_program_spawns_a_job_on_one_node_server() {
    run_pmix_spawn(1, 2, &[]);
}

#[test]
fn a_pmix_program_spawns_a_job_on_three_node_servers() {
    run_pmix_spawn(3, 2, &[]);
}

/// The same with PMIx_Spawn_nb and PMIx_Connect_nb.
#[test]
fn a_pmix_program_spawns_a_job_without_blocking() {
    run_pmix_spawn(3, 3, &["nb"]);
}

/// MPI_Comm_spawn of Open MPI 4.1 (`c/mpi_spawn.c`) under `cohort run --pmix`: the
/// launched job spawns 2 copies of the program, which find it with
/// MPI_Comm_get_parent; both sides reduce over the intercommunicator, exchange
/// point-to-point messages, disconnect and finalize.
fn run_mpi_spawn(nodes: u32, n: u32) {
    let Some(prog) = mpi_program("mpi_spawn") else {
        return;
    };
    let (parents, children) = run_spawner(&prog, &[], nodes, n, 2, Lib::PmixFlag);
    let child_sum: u32 = (0..2).map(|r| 10 + r).sum();
    let parent_sum: u32 = (0..n).map(|r| 1000 + r).sum();
    assert_eq!(
        parents,
        format!("RESULT parent size={n} children=2 sum={child_sum} echoed=2")
    );
    assert_eq!(
        children,
        format!("RESULT child size=2 parents={n} sum={parent_sum} echoed=1")
    );
}

#[test]
fn open_mpi_comm_spawn_runs_on_one_node_server() {
    run_mpi_spawn(1, 2);
}

#[test]
fn open_mpi_comm_spawn_runs_on_three_node_servers() {
    run_mpi_spawn(3, 3);
}

/// With `--pmix` every rank gets the `OMPI_COMM_WORLD_*` variables Open MPI's mpirun
/// sets (scripts read them, e.g. to pick a GPU by local rank); without it, none.
#[test]
fn with_pmix_ranks_see_open_mpis_rank_variables() {
    let show = "echo ${OMPI_COMM_WORLD_RANK-unset} ${OMPI_COMM_WORLD_SIZE-unset} \
                ${OMPI_COMM_WORLD_LOCAL_RANK-unset} ${OMPI_COMM_WORLD_LOCAL_SIZE-unset} \
                ${OMPI_COMM_WORLD_NODE_RANK-unset}";
    let lines = |pmix: bool| {
        let mut args = vec!["run", "--nodes", "2", "-n", "3"];
        if pmix {
            args.push("--pmix");
        }
        args.extend_from_slice(&["sh", "-c", show]);
        let out = run_cohort(&args, DEADLINE);
        let context = format!("{}\n{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{context}");
        let mut l: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
        l.sort();
        l
    };
    // block over 2 node servers: ranks 0 and 1 on node0, rank 2 on node1
    assert_eq!(lines(true), ["0 3 0 2 0", "1 3 1 2 1", "2 3 0 1 0"]);
    assert_eq!(lines(false), vec!["unset unset unset unset unset"; 3]);
}
