//! `cohort run` end to end with real `cohortd` node servers on loopback addresses.
//! Ranks are plain shell commands; they record their pid and their node server's pid
//! in `$DIR/pid.<rank>` where a test needs to check that nothing survives.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use cohort_cluster_tests::*;

/// A test's scratch space: `tmp/` is the launcher's TMPDIR (where the job directory
/// goes), `files/` is `$DIR` for rank scripts.
struct Scratch {
    _dir: TempDir,
    tmp: TempDirView,
    files: PathBuf,
}

struct TempDirView(PathBuf);

impl TempDirView {
    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

fn scratch(tag: &str) -> Scratch {
    let dir = TempDir::new(tag);
    let tmp = dir.path().join("tmp");
    let files = dir.path().join("files");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    Scratch {
        _dir: dir,
        tmp: TempDirView(tmp),
        files,
    }
}

impl Scratch {
    fn cohort(&self, args: &[&str]) -> Command {
        let mut cmd = cohort_command(args);
        cmd.env("TMPDIR", &self.tmp.0).env("DIR", &self.files);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        CohortRun::spawn(self.cohort(args)).wait(DEADLINE)
    }

    fn assert_job_dir_removed(&self) {
        assert_eq!(
            self.tmp.entries(),
            Vec::<String>::new(),
            "the job directory was left behind"
        );
    }

    /// Pids recorded by the ranks that got as far as recording them.
    fn recorded(&self, ranks: u32) -> Vec<u32> {
        (0..ranks)
            .filter_map(|r| std::fs::read_to_string(self.files.join(format!("pid.{r}"))).ok())
            .flat_map(|s| {
                s.split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect()
    }
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn assert_all_gone(pids: &[u32]) {
    let left = survivors(pids, Duration::from_secs(10));
    assert!(left.is_empty(), "processes survived the job: {left:?}");
}

/// Waits (bounded) until `pid` has at least `n` live descendants; returns them.
fn wait_for_descendants(pid: u32, n: usize) -> Vec<u32> {
    let found = wait_until(DEADLINE, || descendants_of(pid).len() >= n);
    let pids = descendants_of(pid);
    assert!(found, "expected {n} processes below {pid}, found {pids:?}");
    pids
}

/// Records `$$ $PPID` (rank pid, node server pid) for the harness.
const RECORD: &str = "echo $$ $PPID > $DIR/pid.$COHORT_RANK";

#[test]
fn every_rank_output_is_forwarded() {
    let s = scratch("fwd");
    let out = s.run(&[
        "run",
        "--nodes",
        "3",
        "-n",
        "5",
        "sh",
        "-c",
        "echo hello from $COHORT_RANK; echo complaint from $COHORT_RANK >&2",
    ]);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let lines = sorted_stdout(&out);
    let want: Vec<String> = (0..5).map(|r| format!("hello from {r}")).collect();
    assert_eq!(lines, want, "{}", describe(&out));
    let err = text(&out.stderr);
    for r in 0..5 {
        assert!(
            err.contains(&format!("complaint from {r}\n")),
            "{}",
            describe(&out)
        );
    }
    s.assert_job_dir_removed();
}

/// `cohort run` starts every node server on this host and so defaults to the tree
/// collective; `--allgather` reaches every node server, and ranks see it in
/// `COHORT_ALLGATHER` (cohort-bench derives its hop count from it).
#[test]
fn the_allgather_choice_reaches_node_servers_and_ranks() {
    let s = scratch("allgather");
    for (given, want) in [
        (None, "tree"),
        (Some("dissemination"), "dissemination"),
        (Some("auto"), "auto"),
    ] {
        let mut args = vec!["run", "--nodes", "2", "-n", "2"];
        if let Some(a) = given {
            args.extend(["--allgather", a]);
        }
        args.extend(["sh", "-c", "echo $COHORT_ALLGATHER"]);
        let out = s.run(&args);
        assert_eq!(code(&out), Some(0), "{}", describe(&out));
        let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
        assert_eq!(
            lines,
            vec![want.to_string(); 2],
            "{given:?}: {}",
            describe(&out)
        );
    }
    let out = s.run(&["run", "--allgather", "ring", "true"]);
    assert_ne!(code(&out), Some(0), "{}", describe(&out));
    assert!(text(&out.stderr).contains("ring"), "{}", describe(&out));
}

#[test]
fn tag_output_prefixes_every_line() {
    let s = scratch("tag");
    let out = s.run(&[
        "run",
        "--tag-output",
        "--nodes",
        "2",
        "-n",
        "2",
        "sh",
        "-c",
        "echo out $COHORT_RANK; echo err $COHORT_RANK >&2; printf 'partial %s' $COHORT_RANK",
    ]);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    let nspace = first
        .strip_prefix('[')
        .and_then(|l| l.split_once(','))
        .map(|(ns, _)| ns.to_string())
        .unwrap_or_default();
    assert!(nspace.starts_with("cohort."), "{}", describe(&out));
    let got: BTreeSet<&str> = stdout.lines().collect();
    let mut want = BTreeSet::new();
    let expected: Vec<String> = (0..2)
        .flat_map(|r| {
            [
                format!("[{nspace},{r}]<stdout>: out {r}"),
                format!("[{nspace},{r}]<stdout>: partial {r}"),
            ]
        })
        .collect();
    want.extend(expected.iter().map(String::as_str));
    assert_eq!(got, want, "{}", describe(&out));
    let stderr = text(&out.stderr);
    for r in 0..2 {
        assert!(
            stderr.contains(&format!("[{nspace},{r}]<stderr>: err {r}\n")),
            "{}",
            describe(&out)
        );
    }
}

#[test]
fn untagged_output_is_forwarded_byte_for_byte() {
    let s = scratch("bytes");
    let out = s.run(&[
        "run",
        "-n",
        "1",
        "sh",
        "-c",
        r"printf 'a\377\376b\n'; printf 'no newline'",
    ]);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    assert_eq!(out.stdout, b"a\xff\xfeb\nno newline");
}

#[test]
fn rank_environment_and_block_mapping() {
    let s = scratch("env");
    let out = s.run(&[
        "run",
        "--nodes",
        "3",
        "-n",
        "7",
        "sh",
        "-c",
        "echo rank=$COHORT_RANK size=$COHORT_SIZE node=$COHORT_NODE_NAME id=$COHORT_NODE_ID \
         local=$COHORT_LOCAL_RANK ns=$COHORT_NSPACE uri=$COHORT_SERVER_URI \
         token=${#COHORT_TOKEN} secret=${COHORT_JOB_SECRET:-unset}",
    ]);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_by_key(|l| {
        l.strip_prefix("rank=")
            .and_then(|r| r.split(' ').next())
            .and_then(|r| r.parse::<u32>().ok())
    });
    assert_eq!(lines.len(), 7, "{}", describe(&out));
    let nodes = [0, 0, 0, 1, 1, 2, 2];
    let locals = [0, 1, 2, 0, 1, 0, 1];
    let nspace = lines[0]
        .split(' ')
        .find_map(|w| w.strip_prefix("ns="))
        .unwrap()
        .to_string();
    assert!(nspace.starts_with("cohort."), "{stdout}");
    for (r, line) in lines.iter().enumerate() {
        let want_prefix = format!(
            "rank={r} size=7 node=node{n} id={n} local={l} ns={nspace} uri=",
            n = nodes[r],
            l = locals[r]
        );
        assert!(
            line.starts_with(&want_prefix),
            "{line:?} !~ {want_prefix:?}"
        );
        assert!(
            line.contains(&format!("/node{}/", nodes[r])),
            "socket should be under the node's directory: {line}"
        );
        assert!(line.ends_with("token=64 secret=unset"), "{line}");
    }
    s.assert_job_dir_removed();
}

#[test]
fn exports_reach_every_rank() {
    let s = scratch("export");
    let mut cmd = s.cohort(&[
        "run",
        "--nodes",
        "2",
        "-n",
        "2",
        "-x",
        "SET_HERE=a b",
        "-x",
        "FROM_LAUNCHER",
        "sh",
        "-c",
        "echo \"$SET_HERE|$FROM_LAUNCHER\"",
    ]);
    cmd.env("FROM_LAUNCHER", "inherited");
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    assert_eq!(
        text(&out.stdout),
        "a b|inherited\na b|inherited\n",
        "{}",
        describe(&out)
    );
}

#[test]
fn exit_status_is_the_failing_rank_status() {
    let s = scratch("status");
    let out = s.run(&[
        "run",
        "-n",
        "3",
        "sh",
        "-c",
        "[ $COHORT_RANK = 1 ] && exit 3; exit 0",
    ]);
    assert_eq!(code(&out), Some(3), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("rank 1 on node0 exited with status 3"),
        "{}",
        describe(&out)
    );
    s.assert_job_dir_removed();
}

#[test]
fn exit_status_is_the_first_failure_under_recovery() {
    let s = scratch("first");
    // Rank 2 fails first; rank 0 fails later, once rank 2 is certainly gone.
    let out = s.run(&[
        "run",
        "--enable-recovery",
        "-n",
        "3",
        "sh",
        "-c",
        "case $COHORT_RANK in
           2) echo $$ > $DIR/first.tmp; mv $DIR/first.tmp $DIR/first; exit 5;;
           0) while [ ! -e $DIR/first ]; do sleep 0.05; done
              p=$(cat $DIR/first)
              while kill -0 $p 2>/dev/null; do sleep 0.05; done
              sleep 0.5; exit 7;;
           *) exit 0;;
         esac",
    ]);
    assert_eq!(code(&out), Some(5), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("rank 2 on node0 exited with status 5; continuing"),
        "{err}"
    );
    assert!(err.contains("2 rank(s) failed"), "{err}");
}

#[test]
fn a_killed_rank_terminates_the_job() {
    let s = scratch("killed");
    let script = format!(
        "{RECORD}
         if [ $COHORT_RANK = 1 ]; then
           i=0
           while [ $i -lt 1200 ]; do
             [ -s $DIR/pid.0 ] && [ -s $DIR/pid.2 ] && [ -s $DIR/pid.3 ] && kill -9 $$
             i=$((i+1)); sleep 0.05
           done
         fi
         exec sleep 300"
    );
    let out = s.run(&["run", "--nodes", "2", "-n", "4", "sh", "-c", &script]);
    assert_eq!(code(&out), Some(137), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("rank 1 on node0 was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    assert!(err.contains("terminating the job"), "{err}");
    let pids = s.recorded(4);
    assert_eq!(pids.len(), 8, "every rank should have recorded its pids");
    assert_all_gone(&pids);
    s.assert_job_dir_removed();
}

#[test]
fn recovery_keeps_the_job_running() {
    let s = scratch("recovery");
    let script = "if [ $COHORT_RANK = 1 ]; then echo $$ > $DIR/gone.tmp; mv $DIR/gone.tmp $DIR/gone; exit 3; fi
         while [ ! -e $DIR/gone ]; do sleep 0.05; done
         p=$(cat $DIR/gone)
         while kill -0 $p 2>/dev/null; do sleep 0.05; done
         sleep 0.5
         echo rank $COHORT_RANK still running";
    let out = s.run(&[
        "run",
        "--enable-recovery",
        "--nodes",
        "2",
        "-n",
        "3",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code(&out), Some(3), "{}", describe(&out));
    let stdout = text(&out.stdout);
    for r in [0, 2] {
        assert!(
            stdout.contains(&format!("rank {r} still running")),
            "{}",
            describe(&out)
        );
    }
    assert!(
        text(&out.stderr).contains("continuing (--enable-recovery)"),
        "{}",
        describe(&out)
    );
}

#[test]
fn timeout_kills_a_hanging_job() {
    let s = scratch("timeout");
    let script = format!("{RECORD}; exec sleep 300");
    let out = s.run(&[
        "run",
        "--timeout",
        "3",
        "--nodes",
        "2",
        "-n",
        "2",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(code(&out), Some(124), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("--timeout 3 s"),
        "{}",
        describe(&out)
    );
    assert_all_gone(&s.recorded(2));
    s.assert_job_dir_removed();
}

#[test]
fn sigterm_to_the_launcher_cleans_up() {
    let s = scratch("sigterm");
    // Not `exec`: each rank's shell has a child of its own, which must go too.
    let script = format!("{RECORD}; sleep 300; echo never");
    let job = CohortRun::spawn(s.cohort(&["run", "--nodes", "2", "-n", "4", "sh", "-c", &script]));
    assert!(
        wait_for_pid_files(&s.files, 4, DEADLINE),
        "ranks did not start"
    );
    let entries = s.tmp.entries();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].starts_with("cohort-"), "{entries:?}");
    // Every node server, rank and rank child (2 + 4 + 4), found while they run.
    let pids = wait_for_descendants(job.pid(), 10);

    job.signal(libc::SIGTERM);
    let out = job.wait(DEADLINE);
    assert_eq!(code(&out), Some(143), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("received SIGTERM"),
        "{}",
        describe(&out)
    );
    assert!(!text(&out.stdout).contains("never"), "{}", describe(&out));
    assert_all_gone(&pids);
    s.assert_job_dir_removed();
}

/// The launcher is a peer of its node servers too. Frozen (SIGSTOP: its connections
/// stay open, as when its host dies or the network cuts it off) it sends no more
/// heartbeats, and each node server stops its ranks and exits within the peer timeout
/// instead of running on alone for ever. Thawed, the launcher finds its node servers
/// gone, ends the job with status 1 and removes its files.
#[test]
fn a_frozen_launcher_ends_its_node_servers_and_their_ranks() {
    let s = scratch("frozenlauncher");
    let script = format!("{RECORD}; sleep 300; echo never");
    let job = CohortRun::spawn(s.cohort(&[
        "run",
        "--nodes",
        "2",
        "-n",
        "4",
        "--heartbeat",
        "0.25",
        "--peer-timeout",
        "3",
        "sh",
        "-c",
        &script,
    ]));
    assert!(
        wait_for_pid_files(&s.files, 4, DEADLINE),
        "ranks did not start"
    );
    // Every node server, rank and rank child (2 + 4 + 4).
    let pids = wait_for_descendants(job.pid(), 10);
    job.signal(libc::SIGSTOP);
    let ended = wait_until(DEADLINE, || pids.iter().all(|&p| !is_alive(p)));
    let left: Vec<u32> = pids.iter().copied().filter(|&p| is_alive(p)).collect();
    job.signal(libc::SIGCONT);
    let out = job.wait(DEADLINE);
    assert!(
        ended,
        "processes outlived their frozen launcher: {left:?}\n{}",
        describe(&out)
    );
    assert_eq!(code(&out), Some(1), "{}", describe(&out));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr
            .matches("lost the launcher (no message from the launcher for 3.0 s)")
            .count(),
        2,
        "each node server says why it stopped:\n{}",
        describe(&out)
    );
    assert!(!text(&out.stdout).contains("never"), "{}", describe(&out));
    s.assert_job_dir_removed();
}

#[test]
fn a_lost_node_server_terminates_the_job() {
    let s = scratch("lostnode");
    let script = format!("{RECORD}; sleep 300");
    let job = CohortRun::spawn(s.cohort(&["run", "--nodes", "2", "-n", "4", "sh", "-c", &script]));
    assert!(
        wait_for_pid_files(&s.files, 4, DEADLINE),
        "ranks did not start"
    );
    let pids = wait_for_descendants(job.pid(), 10);
    // Ranks 2 and 3 run on node1; their parent is node1's cohortd, a child of the
    // launcher this test started.
    let node1 = recorded_pids(&s.files, 4)[2].1;
    assert_eq!(parent_of(node1), Some(job.pid()));
    // SAFETY: kill(2) on a pid just checked to belong to our job.
    unsafe {
        libc::kill(node1 as libc::pid_t, libc::SIGKILL);
    }
    let out = job.wait(DEADLINE);
    assert_eq!(code(&out), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("node server node1"),
        "{}",
        describe(&out)
    );
    assert_all_gone(&pids);
    s.assert_job_dir_removed();
}

#[test]
fn the_job_secret_never_appears_on_a_command_line() {
    let s = scratch("secret");
    let script = format!(
        "{RECORD}
         i=0; while [ ! -e $DIR/go ] && [ $i -lt 1200 ]; do i=$((i+1)); sleep 0.05; done
         echo secret=${{COHORT_JOB_SECRET:-unset}}"
    );
    let mut cmd = s.cohort(&["run", "--nodes", "2", "-n", "3", "sh", "-c", &script]);
    cmd.env("COHORT_LOG", "trace");
    let job = CohortRun::spawn(cmd);
    assert!(
        wait_for_pid_files(&s.files, 3, DEADLINE),
        "ranks did not start"
    );

    let ranks = recorded_pids(&s.files, 3);
    let daemons: BTreeSet<u32> = ranks.iter().map(|&(_, d)| d).collect();
    assert_eq!(daemons.len(), 2);
    let mut secrets = Vec::new();
    for &d in &daemons {
        let secret = initial_env_var(d, "COHORT_JOB_SECRET").expect("daemon got the secret");
        assert_eq!(secret.len(), 64, "32 bytes of hex");
        let token = initial_env_var(d, "COHORT_TOKEN").expect("daemon got the token");
        secrets.push(secret);
        secrets.push(token);
    }
    assert_eq!(secrets[0], secrets[2], "one secret per job");

    let mut everyone = vec![job.pid()];
    everyone.extend(descendants_of(job.pid()));
    for pid in everyone {
        let Some(cmd) = cmdline(pid) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).into_owned();
        for secret in &secrets {
            assert!(
                !cmd.contains(secret.as_str()),
                "pid {pid} shows a secret: {cmd:?}"
            );
        }
    }
    for &(rank, _) in &ranks {
        assert_eq!(initial_env_var(rank, "COHORT_JOB_SECRET"), None);
    }

    std::fs::write(s.files.join("go"), b"").unwrap();
    let out = job.wait(DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    assert_eq!(text(&out.stdout).matches("secret=unset").count(), 3);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        !all.contains(secrets[0].as_str()),
        "the job secret was printed or logged"
    );
}

#[test]
fn a_missing_program_exits_127_with_a_message() {
    let s = scratch("missing");
    let out = s.run(&[
        "run",
        "--nodes",
        "2",
        "-n",
        "2",
        "/nonexistent/cohort-test-program",
    ]);
    assert_eq!(code(&out), Some(127), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(err.contains("cannot start rank"), "{err}");
    assert!(err.contains("/nonexistent/cohort-test-program"), "{err}");
    s.assert_job_dir_removed();
}

#[test]
fn command_line_help_version_and_errors() {
    let out = run_cohort(["--version"], DEADLINE);
    assert_eq!(code(&out), Some(0));
    assert!(
        text(&out.stdout).starts_with("cohort "),
        "{}",
        describe(&out)
    );

    let out = run_cohort(["run", "--help"], DEADLINE);
    assert_eq!(code(&out), Some(0));
    let help = text(&out.stdout);
    for part in [
        "--np",
        "--nodes",
        "--tag-output",
        "--enable-recovery",
        "--timeout",
        "-x",
        "EXAMPLES",
    ] {
        assert!(help.contains(part), "help lacks {part}: {help}");
    }

    // Without -n in an MPMD job's first app context: a usage error naming -n.
    let out = run_cohort(["run", "true", ":", "-n", "1", "true"], DEADLINE);
    assert_eq!(code(&out), Some(2), "{}", describe(&out));
    assert!(text(&out.stderr).contains("-n"), "{}", describe(&out));

    let out = run_cohort(["run", "-n", "1", "-x", "COHORT_RANK=4", "true"], DEADLINE);
    assert_eq!(code(&out), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("COHORT_RANK"),
        "{}",
        describe(&out)
    );
}

#[test]
fn cohortd_refuses_to_run_without_its_secrets() {
    let mut cmd = Command::new(cohortd_bin());
    cmd.args([
        "--node",
        "0",
        "--nodes",
        "1",
        "--node-name",
        "node0",
        "--listen",
        "127.0.1.1:0",
        "--control",
        "127.0.0.1:9",
        "--job-dir",
        "/nonexistent",
        "--nspace",
        "ns",
        "--np",
        "1",
        "--",
        "true",
    ])
    .env_remove("COHORT_JOB_SECRET")
    .env_remove("COHORT_TOKEN")
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(code(&out), Some(2), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("COHORT_JOB_SECRET"),
        "{}",
        describe(&out)
    );
}

/// What a rank started does not outlive its node server: rank 1 starts a background
/// child and SIGKILLs its own node server. The rank dies with it (its parent-death
/// signal), and cohortd's rank guard kills the child — while the job still runs on the
/// other node server (`--enable-recovery`), so not by the launcher's sweep at the end,
/// which is all there is locally: over ssh or under Slurm without cgroups nothing else
/// would.
#[test]
fn a_ranks_children_do_not_outlive_a_killed_node_server() {
    let s = scratch("orphans");
    let script = "if [ \"$COHORT_RANK\" = 1 ]; then \
                    sleep 600 & echo $! > $DIR/orphan.tmp && mv $DIR/orphan.tmp $DIR/orphan; \
                    kill -9 $PPID; wait; \
                  else \
                    i=0; while [ ! -e $DIR/release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; \
                  fi";
    let job = CohortRun::spawn(s.cohort(&[
        "run",
        "--nodes",
        "2",
        "-n",
        "2",
        "--enable-recovery",
        "sh",
        "-c",
        script,
    ]));
    let orphan_file = s.files.join("orphan");
    assert!(
        wait_until(DEADLINE, || orphan_file.exists()),
        "rank 1 never started its child"
    );
    let orphan: u32 = std::fs::read_to_string(&orphan_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let left = survivors(&[orphan], Duration::from_secs(30));
    let job_ran_on = !s.files.join("release").exists();
    std::fs::write(s.files.join("release"), "").unwrap();
    let out = job.wait(DEADLINE);
    assert!(job_ran_on);
    assert!(
        left.is_empty(),
        "rank 1's child {orphan} outlived its killed node server while the job ran on\n{}",
        describe(&out)
    );
    assert!(
        text(&out.stderr).contains("killed 1 process group(s) its ranks left"),
        "{}",
        describe(&out)
    );
    s.assert_job_dir_removed();
}

/// A node server checks the launcher's proof of the job secret before it says anything
/// more: a listener posing as the launcher, answering the registration with a proof
/// made from a guess, gets no proof back, and cohortd exits naming the reason. The
/// secret appears nowhere in what cohortd sent.
#[test]
fn cohortd_refuses_a_launcher_that_cannot_prove_the_secret() {
    use cohort_proto::control::{DaemonMsg, LauncherMsg, RegisterExchange};
    use cohort_proto::frame::{encode, read_frame, MAX_CONTROL_FRAME};
    use std::io::{Read, Write};

    const SECRET_HEX: &str = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7";
    let s = scratch("impostor");
    let impostor = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let control = impostor.local_addr().unwrap().to_string();
    let job_dir = s.files.join("job");
    std::fs::create_dir(&job_dir).unwrap();
    let mut cmd = Command::new(cohortd_bin());
    cmd.args(["--node", "0", "--nodes", "1", "--node-name", "node0"])
        .args(["--listen", "127.0.1.1:0", "--control", &control])
        .arg("--job-dir")
        .arg(&job_dir)
        .args(["--nspace", "ns", "--np", "1", "--", "true"])
        .env("COHORT_JOB_SECRET", SECRET_HEX)
        .env("COHORT_TOKEN", "00112233445566778899aabbccddeeff")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let daemon = CohortRun::spawn(cmd);
    // Bounded: a cohortd that fails before connecting must not hang the test.
    impostor.set_nonblocking(true).unwrap();
    let start = std::time::Instant::now();
    let mut conn = loop {
        match impostor.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(start.elapsed() < DEADLINE, "cohortd never connected");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    let register: Option<DaemonMsg> =
        read_frame(&mut conn, MAX_CONTROL_FRAME, &mut Vec::new()).unwrap();
    let Some(DaemonMsg::Register {
        node,
        nonce,
        fabric_addr,
        pid,
        host,
        cores,
    }) = register
    else {
        panic!("expected a registration, got {register:?}");
    };
    let launcher_nonce = [4u8; 16];
    let guess = RegisterExchange {
        node,
        nonce: &nonce,
        fabric_addr: &fabric_addr,
        pid,
        host: &host,
        cores,
        launcher_nonce: &launcher_nonce,
    }
    .launcher_proof(b"a guess");
    conn.write_all(&encode(&LauncherMsg::Challenge {
        nonce: launcher_nonce,
        proof: guess,
    }))
    .unwrap();
    let mut rest = Vec::new();
    let _ = conn.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "cohortd answered with {} bytes",
        rest.len()
    );
    let out = daemon.wait(DEADLINE);
    assert_ne!(code(&out), Some(0), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("did not prove it holds this job's secret"),
        "{err}"
    );
    assert!(!err.contains(SECRET_HEX), "{err}");
}

/// Writes an executable stand-in for cohortd that records its pid and arguments and
/// then just waits, so the test can play the node server's part (or not).
fn fake_daemon(s: &Scratch) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = s.files.join("fake-cohortd");
    std::fs::write(
        &path,
        "#!/bin/sh\necho \"$$ $*\" >> \"$DIR/fake.$$\"\nexec sleep 300\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `(pid, arguments)` of every fake node server started so far.
fn fake_daemons(s: &Scratch) -> Vec<(u32, String)> {
    std::fs::read_dir(&s.files)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("fake."))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|line| {
            let (pid, args) = line.trim_end().split_once(' ')?;
            Some((pid.parse().ok()?, args.to_string()))
        })
        .collect()
}

#[test]
fn node_servers_that_never_register_fail_the_startup() {
    let s = scratch("noregister");
    let mut cmd = s.cohort(&["run", "--nodes", "2", "-n", "2", "true"]);
    cmd.env("COHORT_DAEMON", fake_daemon(&s))
        .env("COHORT_STARTUP_TIMEOUT", "2");
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(code(&out), Some(1), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(err.contains("did not register within 2 s"), "{err}");
    assert!(err.contains("node0") && err.contains("node1"), "{err}");
    let pids: Vec<u32> = fake_daemons(&s).iter().map(|(p, _)| *p).collect();
    assert_eq!(pids.len(), 2);
    assert_all_gone(&pids);
    s.assert_job_dir_removed();
}

#[test]
fn a_registration_with_the_wrong_secret_is_refused() {
    use cohort_proto::control::DaemonMsg;
    use std::io::Write;

    let s = scratch("badsecret");
    let mut cmd = s.cohort(&["run", "-n", "1", "true"]);
    cmd.env("COHORT_DAEMON", fake_daemon(&s))
        .env("COHORT_STARTUP_TIMEOUT", "3");
    let job = CohortRun::spawn(cmd);
    assert!(wait_until(DEADLINE, || !fake_daemons(&s).is_empty()));
    let (_, args) = fake_daemons(&s).remove(0);
    let control = args
        .split(' ')
        .skip_while(|a| *a != "--control")
        .nth(1)
        .expect("the launcher passes --control")
        .to_string();
    let mut conn = std::net::TcpStream::connect(&control).unwrap();
    let forged = DaemonMsg::Register {
        node: 0,
        nonce: [0; 16],
        fabric_addr: "127.0.1.1:1".into(),
        pid: std::process::id(),
        host: "forged".into(),
        cores: 1,
    };
    conn.write_all(&cohort_proto::frame::encode(&forged))
        .unwrap();
    // The launcher proves the secret first (over the registration and its nonce);
    // a proof made with a guess of the secret is refused.
    let challenge: Option<cohort_proto::control::LauncherMsg> = cohort_proto::frame::read_frame(
        &mut conn,
        cohort_proto::frame::MAX_CONTROL_FRAME,
        &mut Vec::new(),
    )
    .unwrap();
    let Some(cohort_proto::control::LauncherMsg::Challenge { nonce, .. }) = challenge else {
        panic!("expected a challenge, got {challenge:?}");
    };
    let guess = cohort_proto::control::RegisterExchange {
        node: 0,
        nonce: &[0; 16],
        fabric_addr: "127.0.1.1:1",
        pid: std::process::id(),
        host: "forged",
        cores: 1,
        launcher_nonce: &nonce,
    }
    .daemon_proof(&[0; 32]);
    conn.write_all(&cohort_proto::frame::encode(&DaemonMsg::Proof {
        proof: guess,
    }))
    .unwrap();

    let out = job.wait(DEADLINE);
    assert_eq!(code(&out), Some(1), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(err.contains("refused a control connection"), "{err}");
    assert!(err.contains("wrong job secret"), "{err}");
    assert!(err.contains("did not register"), "{err}");
}

/// Node servers raise their open-file soft limit to the hard limit (a collective's
/// root and the launcher hold a connection per node server; the usual 1024 runs out in
/// jobs of a few thousand nodes), and ranks get the limit the user started the job
/// with. The job starts here with a soft limit of 512 under a higher hard limit.
#[test]
fn node_servers_raise_the_open_file_limit_and_ranks_keep_the_users() {
    const SOFT: u64 = 512;
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) },
        0
    );
    if hard.rlim_max <= SOFT {
        eprintln!(
            "skipped: the hard open-file limit {} leaves nothing to raise",
            hard.rlim_max
        );
        return;
    }
    let s = scratch("fdlimit");
    let prog = example("testprog").to_string_lossy().into_owned();
    let mut cmd = s.cohort(&["run", "--nodes", "2", "-n", "2", &prog, "fd-limits"]);
    let lowered = libc::rlimit {
        rlim_cur: SOFT,
        rlim_max: hard.rlim_max,
    };
    // SAFETY: setrlimit is async-signal-safe and reads a struct the closure owns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("FD-LIMITS "))
        .collect();
    assert_eq!(lines.len(), 2, "{}", describe(&out));
    let want = format!(
        "FD-LIMITS rank={SOFT} server={} hard={}",
        hard.rlim_max, hard.rlim_max
    );
    for line in lines {
        assert_eq!(line, want, "{}", describe(&out));
    }
}

/// `cksum` of `data` as the `cksum` command prints it from stdin ("CRC LENGTH").
fn cksum(data: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("cksum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("cksum (coreutils)");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    text(&out.stdout).trim().to_string()
}

/// `cohort run` passes its stdin to the ranks `--stdin` names (rank 0 by default, as
/// Open MPI's mpirun), whole and in order — 3 MiB, many chunks, to a rank of another
/// node server too — and the others read /dev/null.
#[test]
fn stdin_goes_to_rank_0_by_default_or_to_the_ranks_named() {
    let dir = TempDir::new("stdin");
    let input = dir.path().join("in");
    let data: Vec<u8> = (0..(3usize << 20) + 5).map(|i| (i % 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let (full, empty) = (cksum(&data), cksum(&[]));
    let run = |target: Option<&str>| -> Vec<String> {
        let mut args = vec!["run", "--nodes", "2", "-n", "4"];
        if let Some(t) = target {
            args.extend(["--stdin", t]);
        }
        args.extend(["sh", "-c", "echo RESULT $COHORT_RANK $(cksum)"]);
        let mut cmd = cohort_command(args);
        cmd.stdin(std::fs::File::open(&input).unwrap());
        let out = CohortRun::spawn(cmd).wait(DEADLINE);
        assert_eq!(out.status.code(), Some(0), "{target:?}: {}", describe(&out));
        let mut r: Vec<String> = text(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("RESULT ").map(str::to_string))
            .collect();
        r.sort();
        r
    };
    let expect = |takes: &[u32]| -> Vec<String> {
        (0..4)
            .map(|r| {
                let sum = if takes.contains(&r) { &full } else { &empty };
                format!("{r} {sum}")
            })
            .collect()
    };
    assert_eq!(run(None), expect(&[0]));
    assert_eq!(run(Some("3")), expect(&[3]), "rank 3 runs on node1");
    assert_eq!(run(Some("all")), expect(&[0, 1, 2, 3]));
    assert_eq!(run(Some("none")), expect(&[]));
}

/// A job whose ranks never read stdin ends as usual while cohort run's stdin never
/// ends (/dev/zero): stdin is read only as fast as the ranks take it. A rank named
/// by `--stdin` must exist.
#[test]
fn endless_stdin_does_not_hold_a_job_that_ignores_it() {
    let mut cmd = cohort_command(["run", "--nodes", "2", "-n", "2", "--stdin", "all", "true"]);
    cmd.stdin(std::fs::File::open("/dev/zero").unwrap());
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));

    let out = run_cohort(["run", "-n", "2", "--stdin", "2", "true"], DEADLINE);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--stdin 2: the job has 2 rank(s)"), "{err}");
}

/// `--wdir` (mpirun's `--wdir`/`--wd`): ranks start in the given directory, relative
/// to where `cohort run` runs; an app context's own `--wdir` wins over the global one;
/// a directory that does not exist stops its ranks from starting, named.
#[test]
fn ranks_start_in_the_working_directory_asked_for() {
    let s = scratch("wdir");
    std::fs::create_dir_all(s.files.join("sub")).unwrap();
    let files = s.files.canonicalize().unwrap();
    let pwd = ["sh", "-c", "pwd -P"];
    let mut cmd = s.cohort(&["run", "--nodes", "2", "-n", "2", "--wdir", "sub"]);
    cmd.args(pwd).current_dir(&files);
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let sub = format!("{}\n", files.join("sub").display());
    assert_eq!(text(&out.stdout), sub.repeat(2), "{}", describe(&out));
    // MPMD: the first app context takes the global --wdir, the second its own.
    let mut cmd = s.cohort(&["run", "--nodes", "2", "--wd", "/", "-n", "1"]);
    cmd.args(pwd)
        .args([":", "-n", "1", "--wdir", "sub"])
        .args(pwd);
    cmd.current_dir(&files);
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let lines = sorted_stdout(&out);
    assert_eq!(
        lines,
        ["/".to_string(), sub.trim_end().to_string()],
        "{}",
        describe(&out)
    );
    // A directory that is not there.
    let out = s.run(&[
        "run",
        "-n",
        "1",
        "--wdir",
        "/nonexistent/cohort-wdir",
        "true",
    ]);
    assert_eq!(code(&out), Some(127), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot start rank 0") && err.contains("/nonexistent/cohort-wdir"),
        "{err}"
    );
    s.assert_job_dir_removed();
}

/// `--output-filename DIR` (mpirun's): each rank's stdout and stderr go to
/// DIR/1/rank.N/stdout and stderr, written by its node server, and not to the
/// terminal; a relative DIR is taken from where `cohort run` runs.
#[test]
fn output_filename_writes_each_ranks_output_to_its_files() {
    let s = scratch("outfile");
    let files = s.files.canonicalize().unwrap();
    let mut cmd = s.cohort(&["run", "--nodes", "2", "-n", "3", "--output-filename", "out"]);
    cmd.args([
        "sh",
        "-c",
        "echo \"out $COHORT_RANK\"; echo \"err $COHORT_RANK\" >&2",
    ]);
    cmd.current_dir(&files);
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    assert!(
        !text(&out.stdout).contains("out ") && !text(&out.stderr).contains("err "),
        "ranks' output reached the terminal: {}",
        describe(&out)
    );
    for rank in 0..3 {
        let dir = files.join("out").join("1").join(format!("rank.{rank}"));
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        assert_eq!(read("stdout"), format!("out {rank}\n"), "rank {rank}");
        assert_eq!(read("stderr"), format!("err {rank}\n"), "rank {rank}");
    }
    // A directory that cannot be made: the ranks do not start, and it is named.
    let blocked = files.join("a-file");
    std::fs::write(&blocked, b"x").unwrap();
    let dir = blocked.join("out");
    let out = s.run(&[
        "run",
        "-n",
        "1",
        "--output-filename",
        dir.to_str().unwrap(),
        "true",
    ]);
    assert_eq!(code(&out), Some(127), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot start rank 0") && err.contains("output directory"),
        "{err}"
    );
    s.assert_job_dir_removed();
}

/// The lines of `out`'s stdout, sorted (ranks print in any order).
fn sorted_stdout(out: &Output) -> Vec<String> {
    let mut lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    lines.sort();
    lines
}

/// `cohort run --nodes NODES ARGS sh -c SCRIPT`, which must succeed.
fn run_script(nodes: &str, args: &[&str], script: &str) -> Output {
    let mut a = vec!["run", "--nodes", nodes];
    a.extend_from_slice(args);
    a.extend_from_slice(&["sh", "-c", script]);
    let out = run_cohort(&a, DEADLINE);
    assert_eq!(code(&out), Some(0), "{args:?}: {}", describe(&out));
    out
}

/// This host's cores, as `cohort topo` counts them.
fn host_cores() -> u32 {
    let topo = run_cohort(["topo"], DEADLINE);
    text(&topo.stdout)
        .split(" core(s)")
        .next()
        .and_then(|s| s.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no core count in:\n{}", text(&topo.stdout)))
}

/// Without `-n`, as mpirun: as many ranks as this host has cores (`cohort topo`'s
/// count) when every node server runs here.
#[test]
fn without_np_a_rank_runs_on_every_core() {
    let cores = host_cores() as usize;
    let out = run_cohort(
        [
            "run",
            "--nodes",
            "2",
            "sh",
            "-c",
            "echo \"$COHORT_RANK of $COHORT_SIZE\"",
        ],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let lines = sorted_stdout(&out);
    let want: Vec<String> = (0..cores).map(|r| format!("{r} of {cores}")).collect();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(lines, want_sorted, "{}", describe(&out));
}

/// `-N K` (mpirun's -N and --npernode, --map-by ppr:K:node): K ranks on each node
/// server in turn; without `-n`, K per node server. Each node server started its
/// share: the node id and local rank the ranks see come from the node servers' map.
#[test]
fn n_per_node_places_k_ranks_on_each_node_server() {
    let show = "echo \"$COHORT_RANK $COHORT_NODE_ID $COHORT_LOCAL_RANK $COHORT_SIZE\"";
    let lines = |args: &[&str]| sorted_stdout(&run_script("3", args, show));
    let want: Vec<String> = (0..6)
        .map(|r| format!("{r} {} {} 6", r / 2, r % 2))
        .collect();
    assert_eq!(lines(&["-N", "2"]), want);
    // with -n, the node servers fill in turn: the last one gets none here
    assert_eq!(
        lines(&["--map-by", "ppr:2:node", "-n", "3"]),
        ["0 0 0 3", "1 0 1 3", "2 1 0 3"]
    );
    let out = run_cohort(
        ["run", "--nodes", "3", "--npernode", "2", "-n", "7", "true"],
        DEADLINE,
    );
    assert_ne!(code(&out), Some(0), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("7 ranks do not fit") && err.contains("at most 6"),
        "{err}"
    );
}

/// The CPUs of a `COHORT_BINDING` list (`0-1,4`), or `None` for `none`.
fn cpu_list(s: &str) -> Option<BTreeSet<u32>> {
    if s == "none" {
        return None;
    }
    let mut cpus = BTreeSet::new();
    for part in s.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.parse().unwrap(), b.parse().unwrap());
        cpus.extend(a..=b);
    }
    Some(cpus)
}

/// Each rank's binding (rank → CPUs) from lines `RANK BINDING`.
fn bindings_of(out: &Output) -> std::collections::BTreeMap<u32, Option<BTreeSet<u32>>> {
    text(&out.stdout)
        .lines()
        .map(|l| {
            let (r, b) = l.split_once(' ').unwrap_or_else(|| panic!("line {l:?}"));
            (r.parse().unwrap(), cpu_list(b))
        })
        .collect()
}

/// This host's cores as `cohort topo --json` lists them: each one's package and CPUs.
fn topo_cores() -> Vec<(Option<u64>, BTreeSet<u32>)> {
    let topo = run_cohort(["topo", "--json"], DEADLINE);
    let json: serde_json::Value = serde_json::from_slice(&topo.stdout).expect("topo --json");
    json["cores"]
        .as_array()
        .expect("cores")
        .iter()
        .map(|c| {
            let cpus = cpu_list(c["cpuset"].as_str().expect("cpuset")).expect("CPUs");
            (c["package"].as_u64(), cpus)
        })
        .collect()
}

/// `--map-by slot:PE=2` (`--cpus-per-rank 2`): each rank is bound to 2 consecutive
/// cores, the union of the cores ranks 2r and 2r+1 get with one each, also across two
/// node servers on this host; a job that needs more cores than the host has is not
/// bound, and cohort says why.
#[test]
fn several_cores_per_rank_bind_each_rank_to_consecutive_cores() {
    let cores = host_cores();
    if cores < 2 {
        eprintln!("skipped: {cores} core(s), 2 needed");
        return;
    }
    let show = "echo \"$COHORT_RANK $COHORT_BINDING\"";
    let run = |args: &[&str]| run_script("2", args, show);
    let (single, pairs) = (cores.to_string(), (cores / 2).to_string());
    let one = bindings_of(&run(&["-n", &single]));
    for pe in [["--map-by", "slot:PE=2"], ["--cpus-per-rank", "2"]] {
        let two = bindings_of(&run(&["-n", &pairs, pe[0], pe[1]]));
        assert_eq!(two.len() as u32, cores / 2, "{pe:?}: {two:?}");
        for (r, cpus) in &two {
            let want: BTreeSet<u32> = [2 * r, 2 * r + 1]
                .iter()
                .flat_map(|q| one[q].clone().expect("bound with one core each"))
                .collect();
            assert_eq!(
                cpus.as_ref(),
                Some(&want),
                "{pe:?}: rank {r}: {two:?} / {one:?}"
            );
        }
    }
    // Every rank wants 2 cores: more than the host has, so nobody is bound.
    let out = run(&["-n", &single, "--cpus-per-rank", "2"]);
    assert!(
        bindings_of(&out).values().all(Option::is_none),
        "{}",
        describe(&out)
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("of 2 cores each") && err.contains("oversubscribed, not binding"),
        "{err}"
    );
}

/// `--display-map` prints the job's map before it starts: each node server and its
/// ranks, as the node servers then run them.
#[test]
fn display_map_shows_where_the_ranks_run() {
    let show = "echo \"RANK $COHORT_RANK $COHORT_NODE_NAME\"";
    let out = run_cohort(
        [
            "run",
            "--nodes",
            "3",
            "-N",
            "2",
            "-n",
            "5",
            "--display-map",
            "sh",
            "-c",
            show,
        ],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let map_end = lines
        .iter()
        .position(|l| l.starts_with("  node2"))
        .expect("map");
    assert!(lines[0].contains("JOB MAP"), "{stdout}");
    assert!(
        lines[1].ends_with(": 5 ranks on 3 node servers (-N 2)"),
        "{stdout}"
    );
    assert_eq!(
        lines[2..=map_end],
        [
            "  node0: 2 ranks: 0-1",
            "  node1: 2 ranks: 2-3",
            "  node2: 1 rank: 4"
        ]
    );
    // the map comes first, and says where each rank then ran
    let mut ran: Vec<&str> = lines[map_end + 2..].to_vec();
    ran.sort();
    assert_eq!(
        ran,
        [
            "RANK 0 node0",
            "RANK 1 node0",
            "RANK 2 node1",
            "RANK 3 node1",
            "RANK 4 node2"
        ],
        "{stdout}"
    );
}

/// `--display allocation,map` (PRRTE's spelling of `--display-allocation
/// --display-map`): the allocation first (this host's slots, which its node servers
/// share), then the map, then the ranks' output.
#[test]
fn display_allocation_shows_this_hosts_slots_before_the_map() {
    let cores = topo_cores().len();
    let out = run_cohort(
        [
            "run",
            "--nodes",
            "3",
            "-n",
            "2",
            "--display",
            "allocation,map",
            "echo",
            "RAN",
        ],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].contains("ALLOCATED NODES"), "{stdout}");
    let s = if cores == 1 { "" } else { "s" };
    let want = format!(": {cores} slot{s} ({cores} core{s}), shared by 3 node servers");
    assert!(
        lines[1].starts_with("this host") && lines[1].ends_with(&want),
        "{stdout}"
    );
    let slots = format!("slots={cores} (shared)");
    assert_eq!(
        lines[2..5],
        [
            format!("  node0: {slots}"),
            format!("  node1: {slots}"),
            format!("  node2: {slots}")
        ]
    );
    assert!(lines[5].starts_with("====="), "{stdout}");
    assert!(lines[6].contains("JOB MAP"), "{stdout}");
    let ran = lines.iter().position(|l| *l == "RAN").expect("ran");
    assert!(ran > 6, "{stdout}");
}

/// `--rankfile` (Open MPI's): each rank runs on the node server its line names (by
/// name or `+nK`) and is bound to its `slot=` cores (logical cores, or a package's);
/// a rank without a slot is not bound. Without `-n`, the file's ranks are the job.
#[test]
fn a_rankfile_places_and_binds_each_rank() {
    let cores = topo_cores();
    let last = cores.len() - 1;
    let package0: BTreeSet<u32> = cores
        .iter()
        .filter(|(p, _)| *p == cores[0].0)
        .flat_map(|(_, c)| c.iter().copied())
        .collect();
    let dir = TempDir::new("rankfile");
    let file = dir.path().join("ranks");
    std::fs::write(
        &file,
        format!(
            "# Open MPI's format\n\
             rank 2=node0 slot={last}\n\
             rank 0 = +n2 slot=0:*\n\
             rank 1=node2\n\
             rank 3=node1 slot=0   # core 0\n"
        ),
    )
    .unwrap();
    let show = "echo \"$COHORT_RANK $COHORT_NODE_NAME $COHORT_BINDING \
                $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)\"";
    let out = run_cohort(
        [
            "run",
            "--nodes",
            "3",
            "--rankfile",
            file.to_str().unwrap(),
            "sh",
            "-c",
            show,
        ],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    // rank, node, COHORT_BINDING, the CPUs it may run on
    type Placed = (u32, String, Option<BTreeSet<u32>>, BTreeSet<u32>);
    let mut got: Vec<Placed> = text(&out.stdout)
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 4, "{l:?}");
            let allowed = cpu_list(w[3]).expect("a CPU list");
            (
                w[0].parse().unwrap(),
                w[1].to_string(),
                cpu_list(w[2]),
                allowed,
            )
        })
        .collect();
    got.sort();
    assert_eq!(got.len(), 4, "{}", describe(&out));
    let placed: Vec<(u32, &str)> = got.iter().map(|(r, n, _, _)| (*r, n.as_str())).collect();
    assert_eq!(
        placed,
        [(0, "node2"), (1, "node2"), (2, "node0"), (3, "node1")]
    );
    assert_eq!(got[0].2.as_ref(), Some(&package0), "rank 0: package 0");
    assert_eq!(got[1].2, None, "rank 1: no slot, not bound");
    assert_eq!(
        got[2].2.as_ref(),
        Some(&cores[last].1),
        "rank 2: the last core"
    );
    assert_eq!(got[3].2.as_ref(), Some(&cores[0].1), "rank 3: core 0");
    for (rank, _, binding, allowed) in &got {
        if let Some(b) = binding {
            assert_eq!(allowed, b, "rank {rank} runs where COHORT_BINDING says");
        }
    }
}

/// A rankfile mistake stops the job before anything starts, naming the file and the
/// line or rank: a rank left out, a host that is not a node server, a core the host
/// does not have; and --rankfile with a mapping option is a usage error.
#[test]
fn a_rankfile_mistake_is_refused_naming_it() {
    let dir = TempDir::new("rankfile-bad");
    let file = dir.path().join("ranks");
    let path = file.to_str().unwrap();
    for (lines, np, says) in [
        ("rank 0=node0\nrank 2=node1\n", None, "rank 1 is not placed"),
        (
            "rank 0=node0\nrank 1=node1\n",
            Some("3"),
            "rank 2 is not placed",
        ),
        (
            "rank 0=node0\nrank 1=n7\n",
            None,
            "line 2: rank 1: host \"n7\" is not one of the job's nodes (node[0-1])",
        ),
        (
            "rank 0=node1 slot=4095\n",
            None,
            "rank 0 slot=4095: logical core 4095: the host has",
        ),
    ] {
        std::fs::write(&file, lines).unwrap();
        let mut args = vec!["run", "--nodes", "2", "--rankfile", path];
        if let Some(np) = np {
            args.extend(["-n", np]);
        }
        args.extend(["echo", "RAN"]);
        let out = run_cohort(args, DEADLINE);
        assert_eq!(code(&out), Some(1), "{lines:?}: {}", describe(&out));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("--rankfile {path}: {says}")),
            "{lines:?}: {err}"
        );
        assert!(!text(&out.stdout).contains("RAN"), "{lines:?}: a rank ran");
    }
    let out = run_cohort(
        ["run", "--rankfile", path, "--map-by", "node", "echo", "RAN"],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(2), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("it does not go with --map-by"),
        "{}",
        describe(&out)
    );
}

/// `--bind-to socket` (a package): each rank is bound to every allowed CPU of its
/// core's package, as `cohort topo --json` lists the cores.
#[test]
fn bind_to_socket_binds_each_rank_to_its_package() {
    let cores = topo_cores();
    let n = cores.len().to_string();
    let show = "echo \"$COHORT_RANK $COHORT_BINDING\"";
    let out = run_cohort(
        ["run", "-n", &n, "--bind-to", "socket", "sh", "-c", show],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    for (r, cpus) in bindings_of(&out) {
        let package = cores[r as usize].0;
        let want: BTreeSet<u32> = cores
            .iter()
            .filter(|(p, _)| *p == package)
            .flat_map(|(_, c)| c.clone())
            .collect();
        assert_eq!(cpus, Some(want), "rank {r}: {}", describe(&out));
    }
}

/// mpirun's `--bind-to hwthread` binds each rank to one hardware thread, its core's
/// first; `--use-hwthread-cpus` makes the slots hardware threads: without `-n` one
/// rank per thread, each bound to its own, and one more rank than threads is
/// oversubscribed (said in threads, not bound). Across two node servers on this host
/// (the flag reaches them).
#[test]
fn hwthread_binding_and_hwthread_slots() {
    // Each core's CPUs in order; the hardware threads, core after core.
    let cores: Vec<BTreeSet<u32>> = topo_cores().into_iter().map(|(_, c)| c).collect();
    let threads: Vec<u32> = cores.iter().flatten().copied().collect();
    let show = "echo \"$COHORT_RANK $COHORT_BINDING\"";
    let n = cores.len().to_string();
    let out = run_cohort(
        [
            "run",
            "--nodes",
            "2",
            "-n",
            &n,
            "--bind-to",
            "hwthread",
            "sh",
            "-c",
            show,
        ],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let got = bindings_of(&out);
    assert_eq!(got.len(), cores.len(), "{}", describe(&out));
    for (r, cpus) in got {
        let first = *cores[r as usize].first().expect("a core has CPUs");
        assert_eq!(
            cpus,
            Some(BTreeSet::from([first])),
            "rank {r}: {}",
            describe(&out)
        );
    }
    let out = run_cohort(
        [
            "run",
            "--nodes",
            "2",
            "--use-hwthread-cpus",
            "sh",
            "-c",
            show,
        ],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let got = bindings_of(&out);
    assert_eq!(
        got.len(),
        threads.len(),
        "one rank per thread: {}",
        describe(&out)
    );
    for (r, cpus) in got {
        let own = BTreeSet::from([threads[r as usize]]);
        assert_eq!(cpus, Some(own), "rank {r}: {}", describe(&out));
    }
    let more = (threads.len() + 1).to_string();
    let out = run_cohort(
        ["run", "--use-hwthread-cpus", "-n", &more, "sh", "-c", show],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let note = format!("with {} hardware thread", threads.len());
    assert!(
        text(&out.stderr).contains(&note) && text(&out.stderr).contains("not binding"),
        "{}",
        describe(&out)
    );
    assert!(
        bindings_of(&out).values().all(Option::is_none),
        "{}",
        describe(&out)
    );
}

/// mpirun's `--timestamp-output` and `--merge-stderr-to-stdout`, and the same through
/// PRRTE's `--output` directives (abbreviated, with `tag`): every rank's lines, both
/// streams, reach stdout, each starting with `[TIME]` (the UTC time, RFC 3339) and
/// then `<stream>: ` or the tag; nothing of the ranks reaches stderr.
#[test]
fn timestamped_and_merged_output() {
    let prog = "echo out; echo err >&2";
    for (opts, tagged) in [
        (
            vec!["--timestamp-output", "--merge-stderr-to-stdout"],
            false,
        ),
        (vec!["--output", "time,merge,tag"], true),
    ] {
        let mut args = vec!["run", "--nodes", "2", "-n", "2"];
        args.extend_from_slice(&opts);
        args.extend_from_slice(&["sh", "-c", prog]);
        let out = run_cohort(args, DEADLINE);
        assert_eq!(code(&out), Some(0), "{opts:?}: {}", describe(&out));
        let stdout = text(&out.stdout);
        let mut rest: Vec<String> = stdout
            .lines()
            .map(|l| {
                let (stamp, rest) = l.split_once(']').unwrap_or_else(|| panic!("{l:?}"));
                let stamp = stamp.strip_prefix('[').unwrap_or_else(|| panic!("{l:?}"));
                assert!(
                    stamp.len() == 27 && stamp.starts_with("20") && stamp.ends_with('Z'),
                    "{opts:?}: {l:?}"
                );
                rest.to_string()
            })
            .collect();
        rest.sort();
        let want: Vec<String> = match tagged {
            false => [
                "<stderr>: err",
                "<stderr>: err",
                "<stdout>: out",
                "<stdout>: out",
            ]
            .map(String::from)
            .to_vec(),
            true => {
                let ns = rest[0]
                    .strip_prefix('[')
                    .and_then(|r| r.split_once(','))
                    .map(|(ns, _)| ns.to_string())
                    .unwrap_or_else(|| panic!("{rest:?}"));
                let mut w: Vec<String> = (0..2)
                    .flat_map(|r| {
                        [
                            format!("[{ns},{r}]<stdout>: out"),
                            format!("[{ns},{r}]<stderr>: err"),
                        ]
                    })
                    .collect();
                w.sort();
                w
            }
        };
        assert_eq!(rest, want, "{opts:?}: {}", describe(&out));
        assert!(
            !text(&out.stderr).contains("err"),
            "{opts:?}: stderr: {}",
            describe(&out)
        );
    }
    // With --output-filename the two streams go into the stdout file.
    let dir = std::env::temp_dir().join(format!("cohort-merge-{}", std::process::id()));
    let d = dir.to_str().expect("a UTF-8 path");
    let out = run_cohort(
        [
            "run",
            "-n",
            "1",
            "--output-filename",
            d,
            "--merge-stderr-to-stdout",
            "sh",
            "-c",
            "echo out; echo err >&2",
        ],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let file = std::fs::read_to_string(dir.join("1/rank.0/stdout")).expect("the stdout file");
    assert_eq!(file, "out\nerr\n");
    assert!(
        !dir.join("1/rank.0/stderr").exists(),
        "no stderr file when merged"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--timeout` names the ranks still running; with `--get-stack-traces` each one's
/// stack is printed first (gdb on its host: here `sleep`'s, in nanosleep), across two
/// node servers; the job then ends with status 124. Without gdb on the host, each
/// stack says so.
#[test]
fn a_timeout_names_the_running_ranks_and_prints_their_stacks() {
    let prog = "if [ $COHORT_RANK = 0 ]; then exit 0; fi; exec sleep 60";
    let out = run_cohort(
        [
            "run",
            "--nodes",
            "2",
            "-n",
            "3",
            "--timeout",
            "2",
            "--get-stack-traces",
            "sh",
            "-c",
            prog,
        ],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(124), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("still running: rank 1 on node0, rank 2 on node1;"),
        "{}",
        describe(&out)
    );
    let has_gdb = std::process::Command::new("gdb")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    for (rank, node) in [(1, 0), (2, 1)] {
        let header = format!("cohort: stack of rank {rank} on node{node} (pid ");
        let at = err
            .find(&header)
            .unwrap_or_else(|| panic!("no stack of rank {rank}: {}", describe(&out)));
        let stack = &err[at..];
        let stack = &stack[..stack[1..].find("cohort: ").map_or(stack.len(), |e| e + 1)];
        if has_gdb {
            assert!(
                stack.contains("#0") && stack.contains("nanosleep"),
                "rank {rank}: {stack}"
            );
        } else {
            assert!(
                stack.contains("gdb is not installed"),
                "rank {rank}: {stack}"
            );
        }
    }
    assert!(!err.contains("stack of rank 0"), "{}", describe(&out));
}

/// mpirun's `--cpu-set` (`--cpu-list`): ranks are placed on the listed CPUs only: one
/// rank is bound to the one listed CPU, and two ranks on that one CPU are
/// oversubscribed, not bound, yet run on it only (their affinity is the set), also on a
/// second node server; a set with no CPU of this host is refused, named.
#[test]
fn a_cpu_set_limits_where_ranks_run() {
    let last = topo_cores()
        .pop()
        .and_then(|(_, cpus)| cpus.into_iter().next())
        .expect("a core");
    let show = "echo \"$COHORT_RANK $COHORT_BINDING $(grep Cpus_allowed_list /proc/self/status | cut -f2)\"";
    let set = last.to_string();
    for (opt, ranks, binding) in [
        ("--cpu-set", "1", set.clone()),
        ("--cpu-list", "2", "none".into()),
    ] {
        let out = run_cohort(
            [
                "run", "--nodes", "2", "-n", ranks, opt, &set, "sh", "-c", show,
            ],
            DEADLINE,
        );
        assert_eq!(code(&out), Some(0), "{}", describe(&out));
        let lines = sorted_stdout(&out);
        let want: Vec<String> = (0..ranks.parse::<u32>().unwrap())
            .map(|r| format!("{r} {binding} {set}"))
            .collect();
        assert_eq!(lines, want, "{opt} {set}: {}", describe(&out));
    }
    let out = run_cohort(["run", "-n", "1", "--cpu-set", "1000", "true"], DEADLINE);
    assert_eq!(code(&out), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("--cpu-set 1000: none of these CPUs is usable"),
        "{}",
        describe(&out)
    );
}

/// mpirun's `--rank-by`: the node servers hold as many ranks as `--map-by` gives them,
/// numbered by node (round-robin) or by slot (in blocks), as the node servers agree
/// (they build the same map: `COHORT_NODE_NAME` and `COHORT_LOCAL_RANK` are theirs);
/// the finer orders of Open MPI are refused, named.
#[test]
fn rank_by_numbers_the_ranks_in_blocks_or_round_robin() {
    let show = "echo \"$COHORT_RANK $COHORT_NODE_NAME $COHORT_LOCAL_RANK\"";
    for (opts, want) in [
        (
            vec!["--rank-by", "node"],
            [
                "0 node0 0",
                "1 node1 0",
                "2 node0 1",
                "3 node1 1",
                "4 node0 2",
            ],
        ),
        (
            vec!["--map-by", "node", "--rank-by", "slot"],
            [
                "0 node0 0",
                "1 node0 1",
                "2 node0 2",
                "3 node1 0",
                "4 node1 1",
            ],
        ),
    ] {
        let mut args = vec!["run", "-q", "--nodes", "2", "-n", "5"];
        args.extend_from_slice(&opts);
        args.extend_from_slice(&["sh", "-c", show]);
        let out = run_cohort(args, DEADLINE);
        assert_eq!(code(&out), Some(0), "{opts:?}: {}", describe(&out));
        assert_eq!(sorted_stdout(&out), want, "{opts:?}: {}", describe(&out));
    }
    let out = run_cohort(["run", "--rank-by", "socket", "-n", "1", "true"], DEADLINE);
    assert_eq!(code(&out), Some(2), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("--rank-by socket"),
        "{}",
        describe(&out)
    );
}

/// mpirun's `-q`: cohort's note about oversubscribed ranks not being bound is left
/// out; its warning when `--bind-to core` binds them anyway still shows.
#[test]
fn quiet_leaves_out_notes_not_warnings() {
    let n = (host_cores() + 1).to_string();
    let out = run_cohort(["run", "-n", &n, "true"], DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("not binding"),
        "{}",
        describe(&out)
    );
    let out = run_cohort(["run", "-q", "-n", &n, "true"], DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    assert_eq!(text(&out.stderr), "", "{}", describe(&out));
    let out = run_cohort(
        ["run", "--quiet", "--bind-to", "core", "-n", &n, "true"],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("warning: "),
        "{}",
        describe(&out)
    );
}

/// `--mca KEY VALUE` (and mpirun's `-mca`) hands every rank Open MPI's
/// `OMPI_MCA_KEY=VALUE`; `-x` may override one.
#[test]
fn mca_parameters_reach_every_rank() {
    let show = "echo \"$COHORT_RANK $OMPI_MCA_btl $OMPI_MCA_pml\"";
    let out = run_cohort(
        [
            "run",
            "--nodes",
            "2",
            "-n",
            "2",
            "-mca",
            "btl",
            "tcp,self",
            "--mca",
            "pml",
            "ob1",
            "-x",
            "OMPI_MCA_pml=ucx",
            "sh",
            "-c",
            show,
        ],
        DEADLINE,
    );
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let lines = sorted_stdout(&out);
    assert_eq!(
        lines,
        ["0 tcp,self ucx", "1 tcp,self ucx"],
        "{}",
        describe(&out)
    );
}

/// `--app FILE` (Open MPI's appfile): one app context per line, global options on the
/// command line.
#[test]
fn an_appfile_gives_the_jobs_app_contexts() {
    let dir = TempDir::new("appfile");
    let file = dir.path().join("apps");
    std::fs::write(
        &file,
        "# two programs\n-n 2 sh -c 'echo A $COHORT_RANK $COHORT_APPNUM'\n\
         -n 1 -x WORD=hi sh -c 'echo B $COHORT_RANK $COHORT_APPNUM $WORD'\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let out = run_cohort(["run", "--nodes", "2", "--app", f], DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let lines = sorted_stdout(&out);
    assert_eq!(lines, ["A 0 0", "A 1 0", "B 2 1 hi"], "{}", describe(&out));
}

/// The end of a job is not a failure. A node server slow to act on the launcher's
/// `Shutdown` (held 1.5 s here, `COHORT_TEST_HOLD_SHUTDOWN`, a debug-build hook) while
/// the others have shut down used to send its heartbeats to them, find them gone and
/// log each as a lost node server (a warning and an error each) — and tell the others.
/// Every node server now hears that the job is ending before any is told to shut down
/// (`LauncherMsg::Ending`), so the job ends as quietly as it ran.
#[test]
fn a_node_server_slow_to_shut_down_logs_no_loss() {
    let prog = example("testprog").to_string_lossy().into_owned();
    let mut cmd = cohort_command([
        "run",
        "-q",
        "--nodes",
        "3",
        "-n",
        "3",
        "--heartbeat",
        "0.2",
        &prog,
        "construct",
    ]);
    cmd.env_remove("COHORT_LOG")
        .env_remove("RUST_LOG")
        .env("COHORT_TEST_HOLD_SHUTDOWN", "2:1500");
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let results: Vec<String> = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .map(str::to_string)
        .collect();
    assert_eq!(results.len(), 3, "{}", describe(&out));
    assert_eq!(text(&out.stderr), "", "{}", describe(&out));
}

/// A job of 64 node servers (128 ranks) forms one group across all of them and ends
/// cleanly: every rank gets the same 128 members and context id, and nothing is
/// logged. (At this size, node servers told to shut down a moment apart used to log
/// each other as lost, see `a_node_server_slow_to_shut_down_logs_no_loss`.)
#[test]
fn a_group_across_64_node_servers_ends_cleanly() {
    let demo = example("demo").to_string_lossy().into_owned();
    let mut cmd = cohort_command(["run", "-q", "--nodes", "64", "-n", "128", &demo]);
    cmd.env_remove("COHORT_LOG").env_remove("RUST_LOG");
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(code(&out), Some(0), "{}", describe(&out));
    let all: Vec<String> = (0..128).map(|r| r.to_string()).collect();
    let members = format!("members [{}]", all.join(","));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 128, "{}", describe(&out));
    let contexts: BTreeSet<&str> = lines
        .iter()
        .map(|l| {
            assert!(l.contains(&members), "{l}");
            l.split(" context id ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_else(|| panic!("no context id in {l:?}"))
        })
        .collect();
    assert_eq!(contexts.len(), 1, "one context id: {contexts:?}");
    assert_eq!(text(&out.stderr), "", "{}", describe(&out));
}
