//! Spawn (the PMIx standard's PMIx_Spawn, "Process Management" chapter) on real node
//! servers: a process of the session starts a new job, whose processes live in their
//! own namespace, know their parent, and form groups and exchange data with the
//! processes that were there before. `cohort run` ends once every job ended, and a
//! spawned process that fails ends the session as a launched one does.

use cohort_cluster_tests::{
    cohort_command, example, run_testprog_with, text, CohortRun, Job, TempDir, DEADLINE,
};

fn spawn_job(nodes: u32, options: &[&str]) -> Job {
    run_testprog_with(nodes, 2, "spawn", false, options)
}

/// Parents (2) and children (3) all succeed and print one RESULT line each, with one
/// context id for the group spanning both namespaces.
fn check_family(nodes: u32, job: &Job) {
    let r = job.succeeded_with(&format!("spawn on {nodes} node(s)"), 5);
    let parents = r.iter().filter(|l| l.starts_with("spawn parent ")).count();
    let children = r.iter().filter(|l| l.starts_with("spawn child ")).count();
    assert_eq!((parents, children), (2, 3), "{r:?}");
    let ctx: Vec<&str> = r.iter().filter_map(|l| l.split(" ctx ").nth(1)).collect();
    assert!(
        ctx.len() == 5 && ctx.windows(2).all(|w| w[0] == w[1]),
        "the members disagree on the context id: {r:?}"
    );
}

#[test]
fn a_spawned_job_joins_its_parents_group_on_one_node_server() {
    check_family(1, &spawn_job(1, &[]));
}

#[test]
fn a_spawned_job_joins_its_parents_group_on_three_node_servers() {
    check_family(3, &spawn_job(3, &[]));
}

#[test]
fn a_spawned_job_joins_its_parents_group_with_dissemination_allgathers() {
    check_family(3, &spawn_job(3, &["--allgather", "dissemination"]));
}

#[test]
fn spawned_processes_output_is_tagged_with_their_namespace() {
    let job = spawn_job(3, &["--tag-output"]);
    check_family(3, &job);
    for rank in 0..3 {
        let tagged = job.stdout.lines().any(|l| {
            l.starts_with('[')
                && l.contains(&format!("@1,{rank}]<stdout>: RESULT spawn child {rank} "))
        });
        assert!(tagged, "child {rank}'s line is not tagged:\n{}", job.stdout);
    }
}

/// Runs `spawn-wait`: rank 0 spawns `cmd` twice; nobody else ends the session.
fn spawn_wait(cmd: &str) -> Job {
    let var = format!("SPAWN_CMD={cmd}");
    run_testprog_with(3, 2, "spawn-wait", false, &["-x", &var])
}

#[test]
fn a_failing_spawned_process_ends_the_session_naming_it() {
    let job = spawn_wait("/bin/false");
    assert_eq!(
        job.status,
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        job.stdout,
        job.stderr
    );
    // The spawned job is the session's first: `<launched job's namespace>@1`. (Rank
    // 0 may be stopped before it prints the namespace: /bin/false fails at once.)
    let named = job.stderr.lines().any(|l| {
        l.contains("rank ") && l.contains("@1 on node") && l.contains("exited with status 1")
    });
    assert!(named, "{}", job.stderr);
    assert!(!job.stderr.contains("FAIL"), "{}", job.stderr);
}

#[test]
fn a_spawned_program_that_cannot_start_ends_the_session_naming_it() {
    let job = spawn_wait("/nonexistent/cohort-spawn-test");
    assert_eq!(job.status, Some(127), "stderr:\n{}", job.stderr);
    assert!(
        job.stderr.contains("cannot start rank")
            && job.stderr.contains("/nonexistent/cohort-spawn-test")
            && job.stderr.contains("not startable"),
        "{}",
        job.stderr
    );
}

/// Under `--enable-recovery`, a lost node server's spawned processes count as
/// terminated as its launched ones do: every survivor of both jobs agrees on who
/// failed, and the session ends with their status once the survivors are done.
#[test]
fn a_lost_node_server_takes_its_spawned_processes_with_it() {
    for allgather in ["tree", "dissemination"] {
        let job = run_testprog_with(3, 3, "spawn-loss", true, &["--allgather", allgather]);
        let r = job.results();
        assert_eq!(
            r.len(),
            4,
            "{allgather}: 2 launched and 2 spawned survivors report\nstdout:\n{}\nstderr:\n{}",
            job.stdout,
            job.stderr
        );
        assert!(r.windows(2).all(|w| w[0] == w[1]), "{allgather}: {r:?}");
        assert_eq!(job.status, Some(137), "{allgather}:\n{}", job.stderr);
        assert!(
            job.stderr.contains("its ranks 2 and job ")
                && job.stderr.contains("@1's ranks 2 are lost"),
            "{allgather}: the notice names both lost ranks:\n{}",
            job.stderr
        );
    }
}

/// PMIX_UNIV_SIZE (MPI_UNIVERSE_SIZE, what a manager spawns workers up to): the cores
/// of the node servers' hosts, each host once, or the job's size if that is more. The
/// core count is the one `cohort run` reports when the host is oversubscribed.
#[test]
fn the_universe_is_the_hosts_cores_or_the_job() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = 2 * cpus as u32 + 2;
    let universe = |job: &Job| -> u32 {
        let r = job.results();
        assert_eq!(job.status, Some(0), "{r:?}\n{}", job.stderr);
        r.iter()
            .find_map(|l| l.strip_prefix("universe ")?.parse().ok())
            .unwrap_or_else(|| panic!("no universe: {r:?}"))
    };
    let big = run_testprog_with(3, n, "universe", false, &[]);
    let cores: u32 = big
        .stderr
        .split(" with ")
        .nth(1)
        .and_then(|s| s.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no core count in:\n{}", big.stderr));
    assert!(
        cores < n,
        "{cores} cores for {n} ranks, yet oversubscribed?"
    );
    assert_eq!(universe(&big), n, "more ranks than cores: the job's size");
    // Three node servers on this one host: its cores, counted once.
    let one = run_testprog_with(3, 1, "universe", false, &[]);
    assert_eq!(universe(&one), cores.max(1));
}

/// A spawn with a timeout (PMIX_TIMEOUT, PMIX_SPAWN_TIMEOUT) while a node server is
/// frozen, with the failure detector off so nothing else ends the wait: the spawn
/// fails with a timeout that names the frozen server and the processes not started,
/// none of the job's processes ever runs (not even once the server runs again), and
/// the session neither waits for them nor counts them as failed. The next spawn, once
/// the server runs again, works. Without the timeout the first spawn waited until the
/// harness's deadline; without the cancelled job's release, the session did.
#[test]
fn a_spawn_that_times_out_is_cancelled_and_the_session_goes_on() {
    let job = run_testprog_with(3, 3, "spawn-timeout", false, &["--peer-timeout", "0"]);
    let r = job.succeeded_with("spawn-timeout", 5);
    let timed_out: Vec<&String> = r
        .iter()
        .filter(|l| l.starts_with("spawn-timeout timed out: "))
        .collect();
    assert_eq!(timed_out.len(), 1, "{r:?}");
    let msg = timed_out[0];
    assert!(
        msg.contains("@1 by ")
            && msg.contains("node server(s) node2 had not added the job")
            && msg.contains("timed out after 2000 ms")
            && msg.contains("@1:0")
            && msg.contains("@1:2"),
        "the timeout names the job, the frozen server and the processes not started: {msg}"
    );
    assert!(
        r.iter()
            .any(|l| l.starts_with("spawn-timeout then spawned ") && l.ends_with("@2")),
        "{r:?}"
    );
    let children: Vec<&String> = r.iter().filter(|l| l.contains(" child ")).collect();
    assert!(
        children.len() == 3 && children.iter().all(|l| l.contains("@2 (parent ")),
        "only the second spawn's 3 processes ran: {r:?}"
    );
}

/// A spawn cancelled in its starting phase: node servers 0 and 1 started their
/// processes, node server 2 holds `StartJob` (COHORT_TEST_HOLD_START_JOB, a debug
/// build's test hook) past the spawn's limit. The spawn times out naming node2 as
/// the server that had not started its processes, the cancel kills the processes that
/// did start (they would sleep for two minutes), node server 2 starts and kills its
/// own late, and the session ends with status 0.
#[test]
fn a_spawn_cancelled_while_it_starts_kills_what_started() {
    let prog = example("testprog").to_string_lossy().into_owned();
    let mut cmd = cohort_command([
        "run",
        "--nodes",
        "3",
        "-n",
        "3",
        "--peer-timeout",
        "0",
        &prog,
        "spawn-cancel-start",
    ]);
    cmd.env("COHORT_TEST_HOLD_START_JOB", "2:8000");
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    let job = Job {
        status: out.status.code(),
        stdout: text(&out.stdout),
        stderr: text(&out.stderr),
    };
    let r = job.succeeded_with("spawn-cancel", 2);
    let msg = r
        .iter()
        .find(|l| l.starts_with("spawn-cancel timed out: "))
        .unwrap_or_else(|| panic!("{r:?}"));
    assert!(
        msg.contains("node server(s) node2 had not started its processes")
            && msg.contains("timed out after 4000 ms"),
        "the timeout names the server still starting: {msg}"
    );
    assert!(
        r.iter()
            .any(|l| l == "spawn-cancel started 2 still alive []"),
        "the processes that started were killed: {r:?}
{}",
        job.stderr
    );
}

/// Under `--rankfile` the launched ranks hold whatever cores the file gave them, so a
/// spawned job is not bound (rather than bound onto a core a rank may hold).
#[test]
fn under_a_rankfile_spawned_processes_are_not_bound() {
    let dir = TempDir::new("spawn-rankfile");
    let file = dir.path().join("ranks");
    std::fs::write(&file, "rank 0=node0 slot=0\n").unwrap();
    let job = run_testprog_with(
        1,
        1,
        "spawn-bind",
        false,
        &["--rankfile", file.to_str().unwrap()],
    );
    let r = job.results();
    assert_eq!(job.status, Some(0), "{}", job.stderr);
    let binding = |line: &str| -> String {
        let mut it = line.split_whitespace();
        it.find(|w| *w == "binding");
        it.next().unwrap_or_default().to_string()
    };
    let parent = r
        .iter()
        .find(|l| l.starts_with("spawn-bind parent "))
        .unwrap_or_else(|| panic!("no parent line: {r:?}"));
    assert_ne!(
        binding(parent),
        "none",
        "the rankfile binds rank 0: {parent}"
    );
    let children: Vec<&String> = r
        .iter()
        .filter(|l| l.starts_with("spawn-bind child "))
        .collect();
    assert!(children.len() >= 2, "{r:?}");
    for c in children {
        assert_eq!(binding(c), "none", "{c}");
    }
}

/// A spawned job is bound like the launched one (`--bind-to core`), on the cores its
/// host has left: one process spawned next to a bound rank gets a core of its own;
/// once it ended, the next one spawned gets that core again (slots are reused); one
/// with two cores (PMIX_CPUS_PER_PROC) gets two free cores where the host has them,
/// and runs unbound where it does not (one core left of two); a spawn of as many
/// processes as the host has cores would oversubscribe it, so those run unbound, on
/// every CPU (as a launch that oversubscribes does). A spawn bound to `none`
/// (PMIX_BINDTO) is not bound; one bound to a word that is no binding is refused.
#[test]
fn spawned_processes_are_bound_on_the_cores_left() {
    let job = run_testprog_with(1, 1, "spawn-bind", false, &["--bind-to", "core"]);
    let r = job.results();
    assert_eq!(job.status, Some(0), "{}", job.stderr);
    let parent = r
        .iter()
        .find(|l| l.starts_with("spawn-bind parent "))
        .unwrap_or_else(|| panic!("no parent line: {r:?}"));
    let word = |line: &str, key: &str| -> String {
        let mut it = line.split_whitespace();
        it.find(|w| *w == key);
        it.next().unwrap_or_default().to_string()
    };
    let cores: u32 = word(parent, "cores").parse().expect("a core count");
    let children = |ns_end: &str| -> Vec<&String> {
        r.iter()
            .filter(|l| l.starts_with("spawn-bind child ") && word(l, "of").ends_with(ns_end))
            .collect()
    };
    let (first, again, wide, unbound, second) = (
        children("@1"),
        children("@2"),
        children("@3"),
        children("@4"),
        children("@5"),
    );
    assert_eq!(
        (
            first.len() as u32,
            again.len() as u32,
            wide.len() as u32,
            unbound.len() as u32,
            second.len() as u32
        ),
        (1, 1, 1, 1, cores),
        "{r:?}"
    );
    // A CPU list (`0-1,4`) as a set.
    let cpus = |list: &str| -> std::collections::BTreeSet<u32> {
        list.split(',')
            .filter(|p| !p.is_empty())
            .flat_map(|p| {
                let (a, b) = p.split_once('-').unwrap_or((p, p));
                a.parse().unwrap_or(0)..=b.parse().unwrap_or(0)
            })
            .collect()
    };
    let pb = word(parent, "binding");
    let all = cpus(&word(second[0], "allowed"));
    assert!(
        pb != "none" && word(parent, "allowed") == pb,
        "the launched rank is bound: {parent}"
    );
    if cores >= 2 {
        let cb = word(first[0], "binding");
        assert!(
            cb != "none" && word(first[0], "allowed") == cb && cpus(&cb).is_disjoint(&cpus(&pb)),
            "the first spawned process gets a core of its own, not the parent's {pb}: {}",
            first[0]
        );
        // Once it ended, the next spawned process takes the core it freed.
        assert_eq!(
            (word(again[0], "binding"), word(again[0], "allowed")),
            (cb.clone(), cb.clone()),
            "a spawn after the first one's end is bound to the core it freed: {}",
            again[0]
        );
        // Two cores: bound to two that the parent does not hold, or unbound (on
        // every CPU) where only one is left.
        let wb = word(wide[0], "binding");
        if cores >= 3 {
            assert!(
                word(wide[0], "allowed") == wb
                    && cpus(&wb).len() == 2 * cpus(&pb).len()
                    && cpus(&wb).is_disjoint(&cpus(&pb)),
                "a process of two cores gets two free cores (the parent holds {pb}): {}",
                wide[0]
            );
        } else {
            assert!(
                wb == "none" && cpus(&word(wide[0], "allowed")) == all,
                "a process of two cores, one core left: unbound: {}",
                wide[0]
            );
        }
        // PMIX_CPUSET, as the node server answers it: each bound process's own
        // binding, to itself and to the parent asking about its child.
        let seen = r
            .iter()
            .find_map(|l| l.strip_prefix("spawn-bind parent sees its first child's cpuset "))
            .unwrap_or_else(|| panic!("no parent's view of its child: {r:?}"));
        assert_eq!(
            (
                word(parent, "cpuset"),
                word(first[0], "cpuset"),
                seen.to_string()
            ),
            (
                format!("hwloc:{pb}"),
                format!("hwloc:{cb}"),
                format!("hwloc:{cb}")
            ),
            "{r:?}"
        );
    }
    // PMIX_BINDTO: `none` leaves the process unbound although a core is free (the
    // first spawns took it); another word is refused.
    assert!(
        word(unbound[0], "binding") == "none" && cpus(&word(unbound[0], "allowed")) == all,
        "a spawn bound to none (PMIX_BINDTO) runs unbound, cores free or not: {}",
        unbound[0]
    );
    assert!(
        r.iter().any(|l| l == "spawn-bind binding sideways refused"),
        "{r:?}"
    );
    for l in &second {
        assert!(
            word(l, "binding") == "none"
                && cpus(&word(l, "allowed")) == all
                && word(l, "cpuset") == "none",
            "processes that would oversubscribe the host run unbound (no PMIX_CPUSET): {l}"
        );
    }
    assert!(
        cpus(&pb).len() < all.len(),
        "unbound means more CPUs than one core's: {all:?}"
    );
}

/// PMIx "Process Sets": the host may define and delete process sets while the session
/// runs, and tells every process (PMIX_PROCESS_SET_DEFINE / _DELETE). A spawned app's
/// set (PMIX_PSET_NAME) is defined while its job runs, on three node servers; the
/// testprog checks the events, the queries before, during and after, and the refusal
/// of names in use.
#[test]
fn a_spawned_jobs_process_set_is_defined_while_it_runs() {
    let job = run_testprog_with(3, 3, "spawn-pset", false, &["--pset", "launched=0,1,2"]);
    let r = job.succeeded_with("spawn-pset", 10);
    let told = r
        .iter()
        .filter(|l| l.starts_with("spawn-pset parent ") && l.ends_with("told of workers 0,1"))
        .count();
    let children = r
        .iter()
        .filter(|l| l.starts_with("spawn-pset child "))
        .count();
    assert_eq!((told, children), (3, 6), "{r:?}");
    assert!(
        r.iter()
            .any(|l| l == "spawn-pset parent spawned workers again"),
        "{r:?}"
    );
}

/// A spawned job whose processes all die with a lost node server (`--enable-recovery`)
/// ends like any other: the survivors get PROCESS_SET_DELETE for its set (the launcher
/// learns of those deaths from the loss, not from rank exits).
#[test]
fn a_spawned_jobs_set_is_deleted_when_its_node_server_is_lost() {
    let job = run_testprog_with(3, 3, "spawn-pset-loss", true, &[]);
    let r = job.results();
    assert_eq!(
        r, ["spawn-pset-loss deleted"; 2],
        "ranks 0 and 1 report\nstdout:\n{}\nstderr:\n{}",
        job.stdout, job.stderr
    );
}

/// As OpenPMIx's PMIx_Spawn, a spawned application without a working directory runs in
/// its parent's, and a relative one is taken from there; so a parent started with
/// `--wdir` finds `./prog` there. (The children used to start where their node server
/// runs, so `./prog` was not found.)
#[test]
fn a_spawned_job_starts_in_its_parents_working_directory() {
    let dir = TempDir::new("spawn-cwd");
    let wdir = dir.path().canonicalize().unwrap();
    std::fs::create_dir(wdir.join("sub")).unwrap();
    // `./prog` is found in each child's own directory.
    for d in [wdir.clone(), wdir.join("sub")] {
        std::os::unix::fs::symlink(example("testprog"), d.join("prog")).unwrap();
    }
    let w = wdir.display().to_string();
    let job = run_testprog_with(2, 1, "spawn-cwd", false, &["--wdir", &w]);
    let mut r = job.succeeded_with("spawn-cwd", 3);
    r.sort();
    let want = [
        format!("spawn-cwd child {w}"),
        format!("spawn-cwd child {w}/sub"),
        format!("spawn-cwd parent {w}"),
    ];
    assert_eq!(r, want, "stderr:\n{}", job.stderr);
}
