//! Gives the shared library the soname of the PMIx v4 client library, so programs
//! linked against it record `libpmix.so.2`, as they do with OpenPMIx's; and puts a
//! `cohort-pmix/libpmix.so.2` link to it next to the build's binaries, the directory
//! `cohort run --pmix` puts first on the ranks' library path (best effort: a build
//! that cannot make it still builds, and `--pmix` then says what is missing).
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpmix.so.2");
    println!("cargo:rerun-if-changed=build.rs");
    // OUT_DIR is <target>/<profile>/build/cohort-pmix-<hash>/out.
    let Some(profile) = std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .and_then(|out| out.ancestors().nth(3).map(PathBuf::from))
    else {
        return;
    };
    let dir = profile.join("cohort-pmix");
    let link = dir.join("libpmix.so.2");
    if std::fs::create_dir_all(&dir).is_ok() && std::fs::symlink_metadata(&link).is_err() {
        let _ = std::os::unix::fs::symlink("../libpmix.so", &link);
    }
}
