//! The structures, constants and keys of this library against OpenPMIx's `pmix.h`:
//! a C program generated from the lists in `pmix::types` (and the list of stubs) is
//! compiled against the system header and run; it prints every size, offset, constant
//! or key that differs. Needs `libpmix-dev` (`make setup` installs it); without it the
//! test is skipped, except under `CI=true`, where it fails.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

/// Where `pmix.h` is: pkg-config's answer, else Debian's directory.
fn pmix_include() -> Option<PathBuf> {
    let from_pkg_config = Command::new("pkg-config")
        .args(["--cflags-only-I", "pmix"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|f| f.strip_prefix("-I"))
                .map(PathBuf::from)
                .find(|d| d.join("pmix.h").exists())
        });
    from_pkg_config.or_else(|| {
        ["/usr/lib/x86_64-linux-gnu/pmix2/include", "/usr/include"]
            .iter()
            .map(PathBuf::from)
            .find(|d| d.join("pmix.h").exists())
    })
}

fn missing(what: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci,
        "{what} is missing (CI=true): install libpmix-dev and a C compiler (`make setup`)"
    );
    eprintln!("SKIPPED: {what} is missing; install libpmix-dev (`make setup`)");
}

fn program(with_stubs: bool) -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <string.h>\n#include <pmix.h>\n\
         #include <pmix_server.h>\n#include <pmix_tool.h>\n\
         int main(void) {\n  int bad = 0;\n",
    );
    for (ty, field, v) in pmix::types::layout() {
        if field.is_empty() {
            writeln!(
                c,
                "  if (sizeof({ty}) != {v}u) {{ printf(\"sizeof({ty}) is %zu, cohort-pmix has {v}\\n\", sizeof({ty})); bad++; }}"
            )
            .unwrap();
        } else {
            writeln!(
                c,
                "  if (offsetof({ty}, {field}) != {v}u) {{ printf(\"offsetof({ty}, {field}) is %zu, cohort-pmix has {v}\\n\", offsetof({ty}, {field})); bad++; }}"
            )
            .unwrap();
        }
    }
    let lists = [
        pmix::types::STATUSES,
        pmix::types::DATA_TYPES,
        pmix::types::OTHER_CONSTANTS,
        pmix::types::LOCALITIES,
    ];
    for (name, v) in lists.iter().flat_map(|l| l.iter()) {
        writeln!(
            c,
            "  if ((long long)({name}) != {v}LL) {{ printf(\"{name} is %lld, cohort-pmix has {v}\\n\", (long long)({name})); bad++; }}"
        )
        .unwrap();
    }
    for (name, v) in pmix::types::KEYS {
        writeln!(
            c,
            "  if (strcmp({name}, \"{v}\") != 0) {{ printf(\"{name} is %s, cohort-pmix has {v}\\n\", {name}); bad++; }}"
        )
        .unwrap();
    }
    // Every stub names a function of the headers (a typo would export a name nobody
    // calls): taking its address fails to compile if the header has no such function.
    if with_stubs {
        writeln!(c, "  void *fns[] = {{").unwrap();
        for name in pmix::stubs::NOT_SUPPORTED {
            writeln!(c, "    (void *)&{name},").unwrap();
        }
        writeln!(c, "  }};\n  (void)fns;").unwrap();
    }
    c.push_str("  if (bad == 0) printf(\"layout ok\\n\");\n  return bad != 0;\n}\n");
    c
}

#[test]
fn structures_constants_and_keys_match_the_system_pmix_header() {
    let Some(include) = pmix_include() else {
        return missing("pmix.h (libpmix-dev)");
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src = dir.join("pmix_layout.c");
    let exe = dir.join("pmix_layout");
    std::fs::write(&src, program(true)).unwrap();
    // With the stubs' addresses: compiled only (linking would need a library).
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-c", "-o"])
        .arg(dir.join("pmix_layout.o"))
        .arg(&src)
        .arg("-I")
        .arg(&include)
        .output();
    let Ok(cc) = cc else {
        return missing("the C compiler `cc`");
    };
    assert!(
        cc.status.success(),
        "the layout program does not compile against {}:\n{}",
        include.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    // Without them: built and run.
    let run_src = dir.join("pmix_layout_run.c");
    std::fs::write(&run_src, program(false)).unwrap();
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-w", "-O0", "-o"])
        .arg(&exe)
        .arg(&run_src)
        .arg("-I")
        .arg(&include)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cohort-pmix differs from {}/pmix.h:\n{text}",
        include.display()
    );
    assert!(text.contains("layout ok"), "{text}");
}
