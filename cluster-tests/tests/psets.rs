//! MPMD launches and process sets end to end: `cohort run` with app contexts separated
//! by `:` and `--pset`, real `cohortd` node servers, and the `psets` example as the rank
//! program. The example is started under two names (`ocean`, `ice`: links to it) so
//! each rank shows which program it runs; it prints one line of what it sees after
//! checking that the client's lookups, `get` at its node server and its environment
//! agree. Bad command lines must fail with a message before anything starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cohort_cluster_tests::*;

/// A test's scratch space: `tmp/` is the launcher's TMPDIR (where the job directory
/// goes), `bin/` holds the rank program under the names `ocean` and `ice`, `files/` is
/// `$DIR` for shell ranks.
struct Scratch {
    _dir: TempDir,
    tmp: PathBuf,
    bin: PathBuf,
    files: PathBuf,
}

fn scratch(tag: &str) -> Scratch {
    let dir = TempDir::new(tag);
    let tmp = dir.path().join("tmp");
    let bin = dir.path().join("bin");
    let files = dir.path().join("files");
    for d in [&tmp, &bin, &files] {
        std::fs::create_dir_all(d).unwrap();
    }
    let prog = example("psets");
    for name in ["ocean", "ice"] {
        std::os::unix::fs::symlink(&prog, bin.join(name)).unwrap();
    }
    Scratch {
        _dir: dir,
        tmp,
        bin,
        files,
    }
}

impl Scratch {
    /// Path of the rank program under `name`.
    fn prog(&self, name: &str) -> String {
        self.bin.join(name).to_string_lossy().into_owned()
    }

    fn cohort(&self, args: &[&str]) -> Command {
        let mut cmd = cohort_command(args);
        cmd.env("TMPDIR", &self.tmp)
            .env("DIR", &self.files)
            .env_remove("PSETS_TAG");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        CohortRun::spawn(self.cohort(args)).wait(DEADLINE)
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

/// The ranks' lines, sorted by rank (they arrive in any order).
fn rank_lines(out: &Output) -> Vec<String> {
    let mut lines: Vec<String> = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("RANK "))
        .map(String::from)
        .collect();
    lines.sort_by_key(|l| {
        l.split_whitespace()
            .nth(1)
            .and_then(|r| r.parse::<u32>().ok())
    });
    lines
}

#[test]
fn an_mpmd_job_on_one_node_server() {
    let s = scratch("mpmd1");
    let (ocean, ice) = (s.prog("ocean"), s.prog("ice"));
    let out = s.run(&[
        "run",
        "--pset",
        "evens=0,2,4",
        "-x",
        "PSETS_TAG=job",
        "-n",
        "2",
        "--pset",
        "ocean",
        &ocean,
        "a1",
        "-n",
        ":",
        "-n",
        "3",
        "--pset",
        "ice",
        "-x",
        "PSETS_TAG=icy",
        &ice,
        "b1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let sets = "sets=evens:0,2,4;ocean:0-1;ice:2-4";
    let want = [
        format!("RANK 0 node=0 prog=ocean args=a1,-n tag=job app=0/2 apprank=0/2 mine=evens,ocean next=ocean {sets}"),
        format!("RANK 1 node=0 prog=ocean args=a1,-n tag=job app=0/2 apprank=1/2 mine=ocean next=evens,ice {sets}"),
        format!("RANK 2 node=0 prog=ice args=b1 tag=icy app=1/2 apprank=0/3 mine=evens,ice next=ice {sets}"),
        format!("RANK 3 node=0 prog=ice args=b1 tag=icy app=1/2 apprank=1/3 mine=ice next=evens,ice {sets}"),
        format!("RANK 4 node=0 prog=ice args=b1 tag=icy app=1/2 apprank=2/3 mine=evens,ice next=evens,ocean {sets}"),
    ];
    assert_eq!(rank_lines(&out), want, "{}", describe(&out));
    assert!(Scratch::entries(&s.tmp).is_empty(), "job directory left");
}

#[test]
fn an_mpmd_job_over_three_node_servers() {
    let s = scratch("mpmd3");
    let (ocean, ice) = (s.prog("ocean"), s.prog("ice"));
    // Three app contexts (the last runs ocean again, so it is app 2 of the same
    // program), dealt round-robin over 3 node servers: the mapping is over the whole
    // rank list, not per app.
    let out = s.run(&[
        "run", "--nodes", "3", "--map-by", "node", "--pset", "io=0-1,6", "-n", "2", "--pset",
        "ocean", &ocean, ":", "-np", "3", "--pset", "ice", "--pset", "frozen", &ice, "x", "y", ":",
        "-n", "2", &ocean, "late",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let sets = "sets=io:0-1,6;ocean:0-1;ice:2-4;frozen:2-4";
    let want = [
        format!("RANK 0 node=0 prog=ocean args= tag= app=0/3 apprank=0/2 mine=io,ocean next=io,ocean {sets}"),
        format!("RANK 1 node=1 prog=ocean args= tag= app=0/3 apprank=1/2 mine=io,ocean next=ice,frozen {sets}"),
        format!("RANK 2 node=2 prog=ice args=x,y tag= app=1/3 apprank=0/3 mine=ice,frozen next=ice,frozen {sets}"),
        format!("RANK 3 node=0 prog=ice args=x,y tag= app=1/3 apprank=1/3 mine=ice,frozen next=ice,frozen {sets}"),
        format!("RANK 4 node=1 prog=ice args=x,y tag= app=1/3 apprank=2/3 mine=ice,frozen next= {sets}"),
        format!("RANK 5 node=2 prog=ocean args=late tag= app=2/3 apprank=0/2 mine= next=io {sets}"),
        format!("RANK 6 node=0 prog=ocean args=late tag= app=2/3 apprank=1/2 mine=io next=io,ocean {sets}"),
    ];
    assert_eq!(rank_lines(&out), want, "{}", describe(&out));
    assert!(Scratch::entries(&s.tmp).is_empty(), "job directory left");
}

#[test]
fn one_app_context_runs_as_before_and_may_be_a_set() {
    let s = scratch("single");
    let ocean = s.prog("ocean");
    let out = s.run(&["run", "--nodes", "2", "-n", "3", &ocean, "p", "q"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let want = [
        "RANK 0 node=0 prog=ocean args=p,q tag= app=0/1 apprank=0/3 mine= next= sets=",
        "RANK 1 node=0 prog=ocean args=p,q tag= app=0/1 apprank=1/3 mine= next= sets=",
        "RANK 2 node=1 prog=ocean args=p,q tag= app=0/1 apprank=2/3 mine= next= sets=",
    ];
    assert_eq!(rank_lines(&out), want, "{}", describe(&out));

    let out = s.run(&["run", "-n", "2", "--pset", "all", &ocean]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let want = [
        "RANK 0 node=0 prog=ocean args= tag= app=0/1 apprank=0/2 mine=all next=all sets=all:0-1",
        "RANK 1 node=0 prog=ocean args= tag= app=0/1 apprank=1/2 mine=all next=all sets=all:0-1",
    ];
    assert_eq!(rank_lines(&out), want, "{}", describe(&out));
}

#[test]
fn bad_mpmd_command_lines_fail_before_anything_starts() {
    let s = scratch("bad");
    // A rank that ran would leave a file behind.
    let touch = "touch $DIR/started.$COHORT_RANK";
    let long = "p".repeat(256);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["-n", "2", "sh", "-c", touch, ":"],
            "':' at the end of the command line",
        ),
        (
            vec!["-n", "2", "sh", "-c", touch, ":", ":", "-n", "1", "sh", "-c", touch],
            "app context 1 is empty",
        ),
        (
            vec![":", "-n", "1", "sh", "-c", touch],
            "nothing before the first ':'",
        ),
        (
            vec!["-n", "2", "sh", "-c", touch, ":", "-n", "0", "sh", "-c", touch],
            "app context 1 (after ':' number 1): invalid value '0'",
        ),
        (
            vec!["-n", "2", "sh", "-c", touch, ":", "sh", "-c", touch],
            "app context 1 (after ':' number 1): the following required arguments were not provided",
        ),
        (vec!["-n", "0", "sh", "-c", touch], "invalid value '0'"),
        (
            vec!["-n", "2", "--pset", "ocean", "sh", "-c", touch, ":", "-n", "1", "--pset", "ocean", "sh", "-c", touch],
            "--pset ocean is given twice",
        ),
        (
            vec!["-n", "2", "--pset", "", "sh", "-c", touch],
            "a process set name is empty",
        ),
        (
            vec!["-n", "2", "--pset", &long, "sh", "-c", touch],
            "is 256 bytes, longer than the 255-byte limit",
        ),
        (
            vec!["-n", "2", "--pset", "cohort.1234.ab12", "sh", "-c", touch],
            "has the form of a cohort job namespace",
        ),
        (
            vec!["--pset", "io=0-2", "-n", "2", "sh", "-c", touch],
            "--pset io=0-2: rank 2 is not in the job (ranks 0-1)",
        ),
        (
            vec!["-n", "2", "sh", "-c", touch, ":", "-n", "1", "--pset", "io=0", "sh", "-c", touch],
            "give it with the global options, before the first ':'",
        ),
    ];
    for (args, want) in cases {
        let mut argv = vec!["run"];
        argv.extend_from_slice(&args);
        let out = s.run(&argv);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {}", describe(&out));
        let err = text(&out.stderr);
        assert!(err.contains(want), "{argv:?}: wanted {want:?} in\n{err}");
        assert!(out.stdout.is_empty(), "{argv:?}: {}", describe(&out));
        assert!(
            Scratch::entries(&s.tmp).is_empty(),
            "{argv:?}: a job directory was created"
        );
        assert!(
            Scratch::entries(&s.files).is_empty(),
            "{argv:?}: a rank ran"
        );
    }
}

/// Node servers started some other way than by `cohort run` check the application
/// contexts and sets they are given, and refuse ones that do not fit the job.
#[test]
fn cohortd_refuses_app_contexts_and_sets_that_do_not_fit() {
    let base = [
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
        "cohort.7.ab",
        "--np",
        "3",
    ];
    let cases: [(&[&str], &str); 4] = [
        (
            &["--app=2:1", "--app=2:1", "--", "a", "b"],
            "--app: the application contexts hold 4 rank(s), the job has 3",
        ),
        (
            &["--app=1:1", "--app=2:2", "--", "a", "b"],
            "take 3 word(s) after --, there are 2",
        ),
        (&["--pset=far=1-3", "--", "a"], "names rank 3"),
        (
            &["--pset=cohort.7.ab=0", "--", "a"],
            "is the job's namespace",
        ),
    ];
    for (extra, want) in cases {
        let mut cmd = Command::new(cohortd_bin());
        cmd.args(base)
            .args(extra)
            .env("COHORT_JOB_SECRET", "aa")
            .env("COHORT_TOKEN", "bb")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let out = CohortRun::spawn(cmd).wait(DEADLINE);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", describe(&out));
        let err = text(&out.stderr);
        assert!(err.contains(want), "{extra:?}: wanted {want:?} in\n{err}");
    }
}
