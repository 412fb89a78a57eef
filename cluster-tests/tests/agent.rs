//! `cohort run --host … --launch-agent AGENT` without ssh: the agent is a shell script
//! standing in for ssh on this host (it ignores the host, runs the command under a
//! shell of its own, and passes its stdin on), so the launcher's ssh path — secrets on
//! the agent's stdin, node names, slots, the agent's stderr in errors, clean-up — runs
//! in every `cargo test`, without root. `deploy/ssh/ci.sh` runs the same path over a
//! real sshd.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use cohort_cluster_tests::*;

/// Writes the stand-in agent into `dir`: it records its arguments in `dir/argv`,
/// fails like ssh (status 255, a message naming the host) for `$FAIL_HOST`, and
/// otherwise runs the command (its last argument) under `sh -c`, not exec'ed, as sshd
/// would.
fn agent(dir: &Path) -> String {
    let path = dir.join("agent");
    let script = format!(
        "#!/bin/sh\n\
         printf '%s\\n' \"$*\" >> '{argv}'\n\
         host=$1\n\
         if [ \"$host\" = \"${{FAIL_HOST:-}}\" ]; then\n\
         \x20   echo \"fake-agent: connect to host $host port 22: Connection refused\" >&2\n\
         \x20   exit 255\n\
         fi\n\
         sh -c \"$2\"\n\
         exit $?\n",
        argv = dir.join("argv").display()
    );
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

struct Scratch {
    dir: TempDir,
    agent: String,
}

fn scratch(tag: &str) -> Scratch {
    let dir = TempDir::new(tag);
    std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
    let agent = agent(dir.path());
    Scratch { dir, agent }
}

impl Scratch {
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = cohort_command(args);
        cmd.env("TMPDIR", self.dir.path().join("tmp"))
            .env("DIR", self.dir.path())
            .env("COHORT_LAUNCH_AGENT", &self.agent);
        for (k, v) in env {
            cmd.env(k, v);
        }
        CohortRun::spawn(cmd).wait(DEADLINE)
    }

    fn argv(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("argv")).unwrap_or_default()
    }

    fn assert_job_dir_removed(&self) {
        let left = std::fs::read_dir(self.dir.path().join("tmp"))
            .unwrap()
            .count();
        assert_eq!(left, 0, "the job directory was left behind");
    }
}

#[test]
fn node_servers_start_through_the_agent_with_their_secrets_on_stdin() {
    let s = scratch("agent-ok");
    // Distinct loopback addresses stand for hosts; the second takes one rank at most.
    let out = s.run(
        &[
            "run",
            "--host",
            "127.0.1.1,127.0.1.2:1",
            "-n",
            "3",
            "sh",
            "-c",
            "echo RANK $COHORT_RANK on $COHORT_NODE_NAME token $COHORT_TOKEN",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    let mut placed: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RANK "))
        .map(|l| l.split(" token ").next().unwrap_or("").to_string())
        .collect();
    placed.sort();
    assert_eq!(
        placed,
        ["0 on 127.0.1.1", "1 on 127.0.1.1", "2 on 127.0.1.2"],
        "{}",
        describe(&out)
    );
    // The client token travels with the job secret: on the agent's stdin only.
    let token = stdout
        .lines()
        .find_map(|l| l.split(" token ").nth(1))
        .unwrap_or("")
        .trim()
        .to_string();
    assert_eq!(token.len(), 64, "{}", describe(&out));
    let argv = s.argv();
    assert_eq!(argv.lines().count(), 2, "{argv}");
    assert!(argv.contains("cohortd --ssh --node 0"), "{argv}");
    assert!(argv.contains("--node-names 127.0.1.1,127.0.1.2"), "{argv}");
    assert!(argv.contains("--node-ranks 2,1"), "{argv}");
    assert!(
        !argv.contains(&token),
        "a secret on the agent's command line"
    );
    // Not ssh: nothing added to the agent's words.
    assert!(!argv.contains("BatchMode"), "{argv}");
    s.assert_job_dir_removed();
}

/// `--display-allocation` prints each host's slots as soon as the hosts are known,
/// so it shows even when mapping then refuses the job for too few slots. Nothing is
/// started then.
#[test]
fn display_allocation_shows_the_hosts_slots_even_when_mapping_refuses() {
    let s = scratch("agent-alloc");
    let out = s.run(
        &[
            "run",
            "--host",
            "127.0.1.1:2,127.0.1.2:1",
            "--display-allocation",
            "-n",
            "4",
            "true",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>()[1..4],
        [
            "hosts from --host: 2 hosts, 3 slots",
            "  127.0.1.1: slots=2",
            "  127.0.1.2: slots=1"
        ],
        "{}",
        describe(&out)
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("4 ranks, but the hosts have only 3 slot(s)"),
        "{}",
        describe(&out)
    );
    assert_eq!(s.argv(), "", "no node server was started");
    s.assert_job_dir_removed();
}

/// `--rankfile` over hosts: the file's hosts are --host's names, every node server
/// gets the whole map in one argument (no --node-ranks), binds its own ranks on its
/// own host, and refuses to start when its host lacks a rank's core, naming both.
#[test]
fn a_rankfile_places_ranks_on_the_hosts_it_names() {
    let s = scratch("agent-rankfile");
    let file = s.dir.path().join("ranks");
    std::fs::write(
        &file,
        "rank 0=127.0.1.2 slot=0\nrank 1=127.0.1.1\nrank 2=+n1\n",
    )
    .unwrap();
    let show = "echo RANK $COHORT_RANK on $COHORT_NODE_NAME bound $COHORT_BINDING";
    let out = s.run(
        &[
            "run",
            "--host",
            "127.0.1.1:1,127.0.1.2:1",
            "--rankfile",
            file.to_str().unwrap(),
            "sh",
            "-c",
            show,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let mut placed: Vec<String> = text(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("RANK "))
        .map(|l| l.split(" bound ").next().unwrap_or("").to_string())
        .collect();
    placed.sort();
    // Two ranks on a host of one slot: a rankfile is not held to the slots.
    assert_eq!(
        placed,
        ["0 on 127.0.1.2", "1 on 127.0.1.1", "2 on 127.0.1.2"],
        "{}",
        describe(&out)
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("RANK 1 on 127.0.1.1 bound none"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("RANK 0 on 127.0.1.2 bound none"),
        "{stdout}"
    );
    let argv = s.argv();
    assert!(argv.contains("--rank-map 1=0/0/1"), "{argv}");
    assert!(!argv.contains("--node-ranks"), "{argv}");

    // Over ssh the hosts are not this one: each node server checks its ranks' cores.
    std::fs::write(&file, "rank 0=127.0.1.1\nrank 1=127.0.1.2 slot=4095\n").unwrap();
    let out = s.run(
        &[
            "run",
            "--host",
            "127.0.1.1,127.0.1.2",
            "--rankfile",
            file.to_str().unwrap(),
            "echo",
            "RAN",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("127.0.1.2: --rankfile: rank 1 slot=4095: logical core 4095: the host has"),
        "{}",
        describe(&out)
    );
    assert!(!text(&out.stdout).contains("RAN"), "{}", describe(&out));
    s.assert_job_dir_removed();
}

#[test]
fn a_host_the_agent_cannot_reach_fails_the_job_naming_it() {
    let s = scratch("agent-fail");
    let out = s.run(
        &[
            "run",
            "--host",
            "127.0.1.1,127.0.1.2",
            "-n",
            "2",
            "sleep",
            "30",
        ],
        &[("FAIL_HOST", "127.0.1.2")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("node server 127.0.1.2 (")
            && err.contains("exited with status 255 unexpectedly [its stderr: fake-agent: connect to host 127.0.1.2 port 22: Connection refused] during startup"),
        "{}",
        describe(&out)
    );
    // Said once, in the error: the agent's stderr was held back, not printed apart.
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    s.assert_job_dir_removed();
}

#[test]
fn sigkill_to_the_launcher_stops_the_node_servers_and_ranks() {
    let s = scratch("agent-kill");
    let mut cmd = cohort_command([
        "run",
        "--host",
        "127.0.1.1,127.0.1.2",
        "-n",
        "2",
        "sh",
        "-c",
        "echo $$ $PPID > $DIR/pid.$COHORT_RANK; sleep 300",
    ]);
    cmd.env("TMPDIR", s.dir.path().join("tmp"))
        .env("DIR", s.dir.path())
        .env("COHORT_LAUNCH_AGENT", &s.agent);
    let job = CohortRun::spawn(cmd);
    assert!(
        wait_for_pid_files(s.dir.path(), 2, DEADLINE),
        "ranks did not start"
    );
    let pids: Vec<u32> = recorded_pids(s.dir.path(), 2)
        .into_iter()
        .flat_map(|(rank, server)| [rank, server])
        .collect();
    job.signal(libc::SIGKILL);
    let out = job.wait(DEADLINE);
    assert_eq!(out.status.code(), None, "{}", describe(&out));
    let left = survivors(&pids, Duration::from_secs(20));
    assert!(left.is_empty(), "processes survived the launcher: {left:?}");
    // The last node server out removed the (shared) job directory.
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_dir(
            s.dir.path().join("tmp")
        )
        .unwrap()
        .count()
            == 0),
        "the job directory was left behind"
    );
}
