//! Gives the shared library a soname, `libcohort.so.<major version>`, so a C program
//! linked against it records that name (as with any installed C library), and `make
//! install` (scripts/install.sh) can put it in PREFIX/lib as `libcohort.so.<version>`
//! with the usual `libcohort.so.<major>` and `libcohort.so` links. In the build tree
//! the library stays `libcohort_c.so` (the `cohort` crate's rlib is `libcohort.rlib`
//! there); a `libcohort.so.<major>` link to it is put next to it so programs linked
//! with `-L target/<profile> -lcohort_c` find it at run time (best effort, like
//! runtime/pmix's `cohort-pmix/libpmix.so.2`).
use std::path::PathBuf;

fn main() {
    let soname = format!("libcohort.so.{}", env!("CARGO_PKG_VERSION_MAJOR"));
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    println!("cargo:rerun-if-changed=build.rs");
    // OUT_DIR is <target>/<profile>/build/cohort-capi-<hash>/out.
    let Some(profile) = std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .and_then(|out| out.ancestors().nth(3).map(PathBuf::from))
    else {
        return;
    };
    let link = profile.join(&soname);
    if std::fs::symlink_metadata(&link).is_err() {
        let _ = std::os::unix::fs::symlink("libcohort_c.so", &link);
    }
}
