//! An installed cohort (`make install`, `scripts/install.sh`), used from its prefix as a
//! site's users would: the build this test runs from (debug under `cargo test`; the
//! script with `NO_BUILD=1`, so nothing is rebuilt) is installed into a scratch prefix,
//! and everything after runs with a PATH that does not reach cargo's target directory,
//! no `LD_LIBRARY_PATH` and no `COHORT_*` variable:
//!
//! * `PREFIX/bin/cohort run --nodes 2 -n 4` runs `testprog construct`, and the ranks'
//!   node servers are `PREFIX/bin/cohortd` (each rank's parent process);
//! * `cluster-tests/c/capi_demo.c` compiles with `cc … $(pkg-config --cflags --libs
//!   cohort)` (`PKG_CONFIG_PATH=PREFIX/lib/pkgconfig`), resolves `libcohort.so.0` in
//!   `PREFIX/lib` by the rpath cohort.pc gives, and runs under the installed `cohort`;
//! * `cohort run --pmix` puts `PREFIX/lib/cohort/pmix` first on the ranks' library
//!   path, where `libpmix.so.2` resolves (`ldd` from inside a rank), and
//!   `cluster-tests/c/pmix_demo.c` runs on it (skipped, loudly, without `pmix.h`);
//! * `uninstall` leaves no file behind; a `DESTDIR` install writes only under
//!   `DESTDIR/PREFIX`, and its cohort.pc names `PREFIX`.
//!
//! `pkg-config`, `cc` or `pmix.h` missing skips its part, except under `CI=true`, where
//! it fails (`make setup` installs them).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cohort_cluster_tests::{
    bin, describe, example, pmix_include, target_dir, text, tool_missing, CohortRun, TempDir,
    DEADLINE,
};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cluster-tests is inside the repository")
}

/// Makes sure the build this test runs from has everything the script installs
/// (binaries, libcohort_c.so, libpmix.so), building missing pieces in this profile.
fn ensure_built() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        for b in ["cohort", "cohortd", "cohort-bench"] {
            bin(b);
        }
        let target = target_dir();
        if !(target.join("libcohort_c.so").exists() && target.join("libpmix.so").exists()) {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-p", "cohort-capi", "-p", "cohort-pmix"]);
            if target.file_name() == Some(OsStr::new("release")) {
                cmd.arg("--release");
            }
            if let Some(root) = target.parent() {
                cmd.env("CARGO_TARGET_DIR", root);
            }
            let _ = cmd.current_dir(repo()).status();
        }
    });
}

/// `scripts/install.sh ACTION` for PREFIX `prefix` (and `destdir`), of this test's build
/// (PROFILE and CARGO_TARGET_DIR from where the test runs, NO_BUILD=1).
fn install_sh(action: &str, prefix: &Path, destdir: Option<&Path>) -> Output {
    ensure_built();
    let target = target_dir();
    let profile = target.file_name().expect("a profile directory");
    let out = Command::new("bash")
        .arg(repo().join("scripts/install.sh"))
        .arg(action)
        .env("PREFIX", prefix)
        .env("DESTDIR", destdir.unwrap_or(Path::new("")))
        .env("PROFILE", profile)
        .env("NO_BUILD", "1")
        .env(
            "CARGO_TARGET_DIR",
            target.parent().expect("a target directory"),
        )
        .stdin(Stdio::null())
        .output()
        .expect("bash runs scripts/install.sh");
    assert!(
        out.status.success(),
        "install.sh {action} failed: {}",
        describe(&out)
    );
    out
}

/// Every file and symbolic link under `dir` (relative path → link target, or "" for a
/// file).
fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path).expect("an entry's metadata");
            if meta.is_dir() {
                walk(root, &path, out);
                continue;
            }
            let rel = path.strip_prefix(root).expect("under the root");
            let link = std::fs::read_link(&path)
                .map(|l| l.display().to_string())
                .unwrap_or_default();
            out.insert(rel.display().to_string(), link);
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// What `install` puts in a prefix: cohort's binaries, the C library under its
/// versioned name with the soname and development links, the header, cohort.pc, and
/// libpmix.so.2 in a directory of cohort's own (not lib/, where it would shadow the
/// system's OpenPMIx).
fn expected_tree() -> BTreeMap<String, String> {
    let major = VERSION.split('.').next().expect("a version");
    let real = format!("libcohort.so.{VERSION}");
    let soname = format!("libcohort.so.{major}");
    [
        ("bin/cohort", ""),
        ("bin/cohortd", ""),
        ("bin/cohort-bench", ""),
        ("include/cohort.h", ""),
        (&format!("lib/{real}"), ""),
        (&format!("lib/{soname}"), &real),
        ("lib/libcohort.so", &soname),
        ("lib/pkgconfig/cohort.pc", ""),
        ("lib/cohort/pmix/libpmix.so.2", ""),
        ("lib/cohort/pmix/libpmix.so", "libpmix.so.2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Removes what would let a program find cohort's build tree instead of the prefix:
/// every `COHORT_*` variable, `LD_LIBRARY_PATH` (cargo sets it for tests, with the
/// target directory in it), `PKG_CONFIG_*`, and PATH entries inside the target
/// directory.
fn clean_env(cmd: &mut Command) -> &mut Command {
    let target_root = target_dir()
        .parent()
        .expect("a target directory")
        .to_path_buf();
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("COHORT_") || k.starts_with("PKG_CONFIG_") || k == "LD_LIBRARY_PATH" {
            cmd.env_remove(&*k);
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|d| !d.starts_with(&target_root))
        .collect();
    cmd.env(
        "PATH",
        std::env::join_paths(kept).expect("PATH entries join"),
    )
}

/// The installed `cohort ARGS…`, run in `work` in a clean environment (see
/// [`clean_env`]), bounded by [`DEADLINE`].
fn installed_cohort(prefix: &Path, work: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(prefix.join("bin/cohort"));
    clean_env(&mut cmd)
        .args(args)
        .current_dir(work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    CohortRun::spawn(cmd).wait(DEADLINE)
}

/// The lines of a successful job's output that start with `tag` (without it).
fn tagged(out: &Output, what: &str, tag: &str) -> Vec<String> {
    assert_eq!(out.status.code(), Some(0), "{what}: {}", describe(out));
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix(tag).map(str::to_string))
        .collect()
}

/// A rank program's job on the installed tree, and the node servers it ran under are
/// the installed cohortd.
fn runs_jobs_with_the_installed_cohortd(prefix: &Path, work: &Path) {
    let testprog = example("testprog");
    let prog = testprog.to_str().expect("a UTF-8 path");
    let out = installed_cohort(
        prefix,
        work,
        &["run", "--nodes", "2", "-n", "4", prog, "construct"],
    );
    let results = tagged(&out, "testprog construct", "RESULT ");
    assert_eq!(results.len(), 4, "{}", describe(&out));
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
    assert!(
        results[0].starts_with("members=0,1,2,3 ctx="),
        "{results:?}"
    );

    let script = "echo DAEMON $(readlink /proc/$PPID/exe)";
    let out = installed_cohort(
        prefix,
        work,
        &["run", "--nodes", "2", "-n", "4", "/bin/sh", "-c", script],
    );
    let daemons = tagged(&out, "the node servers' executable", "DAEMON ");
    let cohortd = std::fs::canonicalize(prefix.join("bin/cohortd")).expect("installed cohortd");
    assert_eq!(
        daemons,
        vec![cohortd.display().to_string(); 4],
        "{}",
        describe(&out)
    );
}

/// `cc` with `args`; `None` (a skip, or a failure in CI) when there is no `cc`.
fn compile(what: &str, script: &str, args: &[&OsStr], env: &[(&str, &Path)]) -> Option<()> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).arg("sh").args(args);
    clean_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("sh runs");
    if out.status.code() == Some(127) {
        tool_missing(&format!(
            "a tool to compile {what} ({})",
            text(&out.stderr).trim()
        ));
        return None;
    }
    assert!(
        out.status.success(),
        "compiling {what} failed: {}",
        describe(&out)
    );
    Some(())
}

/// Where `ldd` (run in `cmd`'s environment) resolves `lib` for `prog`.
fn ldd_line(out: &Output, lib: &str) -> String {
    text(&out.stdout)
        .lines()
        .find(|l| l.contains(lib))
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| panic!("ldd does not list {lib}: {}", describe(out)))
}

/// A C program built with pkg-config's flags for the installed cohort.pc finds the
/// installed libcohort by itself and runs under the installed cohort.
fn a_c_program_builds_with_pkg_config_and_runs(prefix: &Path, work: &Path) {
    if Command::new("pkg-config")
        .arg("--version")
        .output()
        .is_err()
    {
        tool_missing("pkg-config");
        return;
    }
    let pc_path = prefix.join("lib/pkgconfig");
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "cohort"])
        .env("PKG_CONFIG_PATH", &pc_path)
        .output()
        .expect("pkg-config runs");
    let flags_text = text(&flags.stdout);
    assert!(flags.status.success(), "{}", describe(&flags));
    for want in [
        format!("-I{}/include", prefix.display()),
        format!("-L{}/lib", prefix.display()),
        format!("-Wl,-rpath,{}/lib", prefix.display()),
        "-lcohort".to_string(),
    ] {
        assert!(
            flags_text.split_whitespace().any(|f| f == want),
            "{want} not in `pkg-config --cflags --libs cohort`: {flags_text}"
        );
    }

    let prog = work.join("capi_demo");
    let src = repo().join("cluster-tests/c/capi_demo.c");
    let script =
        r#"cc -std=c11 -Wall -Wextra -Werror -o "$1" "$2" $(pkg-config --cflags --libs cohort)"#;
    let built = compile(
        "capi_demo.c",
        script,
        &[prog.as_os_str(), src.as_os_str()],
        &[("PKG_CONFIG_PATH", &pc_path)],
    );
    if built.is_none() {
        return;
    }
    let mut ldd = Command::new("ldd");
    let ldd = clean_env(&mut ldd).arg(&prog).output().expect("ldd runs");
    let line = ldd_line(&ldd, "libcohort.so.");
    let want = format!("{}/lib/libcohort.so.", prefix.display());
    assert!(
        line.contains(&want),
        "libcohort resolves elsewhere than {want}: {line}"
    );

    let p = prog.to_str().expect("a UTF-8 path");
    let out = installed_cohort(
        prefix,
        work,
        &["run", "--nodes", "2", "--pset", "evens=0,2", "-n", "4", p],
    );
    assert!(
        !text(&out.stderr).contains("FAIL rank"),
        "{}",
        describe(&out)
    );
    let results = tagged(&out, "capi_demo", "RESULT ");
    // One member leaves the group; the three others report it.
    assert_eq!(results.len(), 3, "{}", describe(&out));
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
    assert!(
        results[0].starts_with("members=4 ctx=") && results[0].contains(" failed=0 conn="),
        "{results:?}"
    );
}

/// `--pmix` from the installed tree puts the installed private libpmix.so.2 first on
/// the ranks' library path, and a PMIx program runs on it.
fn pmix_programs_get_the_installed_libpmix(prefix: &Path, work: &Path) {
    let pmixdir = prefix.join("lib/cohort/pmix");
    let out = installed_cohort(
        prefix,
        work,
        &[
            "run",
            "--pmix",
            "--nodes",
            "2",
            "-n",
            "2",
            "/bin/sh",
            "-c",
            "echo LIBPATH $LD_LIBRARY_PATH",
        ],
    );
    let paths = tagged(&out, "--pmix's library path", "LIBPATH ");
    assert_eq!(paths.len(), 2, "{}", describe(&out));
    for p in &paths {
        assert_eq!(
            p.split(':').next(),
            Some(pmixdir.to_str().expect("a UTF-8 path")),
            "{}",
            describe(&out)
        );
    }

    let Some(include) = pmix_include() else {
        tool_missing(
            "pmix.h (libpmix-dev): the PMIx program on the installed libpmix.so.2 is not run",
        );
        return;
    };
    let prog = work.join("pmix_demo");
    let src = repo().join("cluster-tests/c/pmix_demo.c");
    // Linked as a PMIx program is against any libpmix: by the soname, no rpath (and
    // hwloc, with which it checks the topology its node server serves).
    let script = r#"cc -std=gnu11 -Wall -Wextra -Werror -o "$1" "$2" -I"$3" -L"$4" -lpmix -lhwloc"#;
    let built = compile(
        "pmix_demo.c",
        script,
        &[
            prog.as_os_str(),
            src.as_os_str(),
            include.as_os_str(),
            pmixdir.as_os_str(),
        ],
        &[],
    );
    if built.is_none() {
        return;
    }
    let p = prog.to_str().expect("a UTF-8 path");
    // Inside a rank of `--pmix`, libpmix.so.2 resolves in the installed private directory.
    let out = installed_cohort(prefix, work, &["run", "--pmix", "-n", "1", "ldd", p]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let line = ldd_line(&out, "libpmix.so.2");
    let want = pmixdir.join("libpmix.so.2").display().to_string();
    assert!(
        line.contains(&want),
        "libpmix.so.2 resolves elsewhere than {want}: {line}"
    );

    let out = installed_cohort(
        prefix,
        work,
        &[
            "run",
            "--pmix",
            "--nodes",
            "2",
            "--pset",
            "evens=0,2",
            "-n",
            "4",
            p,
        ],
    );
    assert!(
        !text(&out.stderr).contains("FAIL rank"),
        "{}",
        describe(&out)
    );
    let results = tagged(&out, "pmix_demo", "RESULT ");
    assert_eq!(results.len(), 4, "{}", describe(&out));
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
    assert!(
        results[0].starts_with("size=4 nodes=2 members=4 ctx="),
        "{results:?}"
    );
}

#[test]
fn an_installed_cohort_runs_jobs_c_and_pmix_programs_and_uninstalls_without_a_trace() {
    let tmp = TempDir::new("install");
    let prefix = tmp.path().join("prefix");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).expect("a work directory");
    install_sh("install", &prefix, None);
    assert_eq!(
        tree(&prefix),
        expected_tree(),
        "what install put in {}",
        prefix.display()
    );

    runs_jobs_with_the_installed_cohortd(&prefix, &work);
    a_c_program_builds_with_pkg_config_and_runs(&prefix, &work);
    pmix_programs_get_the_installed_libpmix(&prefix, &work);

    // Installing again over an installed tree replaces it in place.
    install_sh("install", &prefix, None);
    assert_eq!(tree(&prefix), expected_tree());

    install_sh("uninstall", &prefix, None);
    assert_eq!(tree(&prefix), BTreeMap::new(), "left after uninstall");
    assert!(!prefix.join("lib/cohort").exists(), "lib/cohort is left");
}

#[test]
fn a_destdir_install_writes_only_under_destdir_and_names_the_prefix() {
    let tmp = TempDir::new("install-destdir");
    let stage = tmp.path().join("stage");
    // A prefix that does not exist here: only DESTDIR may be written to.
    let prefix = tmp.path().join("opt/cohort");
    install_sh("install", &prefix, Some(&stage));
    assert!(!prefix.exists(), "{} was written to", prefix.display());
    let staged = stage.join(prefix.strip_prefix("/").expect("an absolute prefix"));
    let everything = tree(&stage);
    let expected: BTreeMap<String, String> = expected_tree()
        .into_iter()
        .map(|(k, v)| {
            (
                staged
                    .join(k)
                    .strip_prefix(&stage)
                    .unwrap()
                    .display()
                    .to_string(),
                v,
            )
        })
        .collect();
    assert_eq!(everything, expected, "what a DESTDIR install wrote");
    let pc = std::fs::read_to_string(staged.join("lib/pkgconfig/cohort.pc")).expect("cohort.pc");
    assert!(
        pc.lines()
            .any(|l| l == format!("prefix={}", prefix.display()))
            && !pc.contains(&stage.display().to_string()),
        "cohort.pc must name PREFIX, not DESTDIR:\n{pc}"
    );
    install_sh("uninstall", &prefix, Some(&stage));
    assert_eq!(tree(&stage), BTreeMap::new(), "left after uninstall");
}
