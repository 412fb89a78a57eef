//! Gives the shared library the soname of the PMIx v4 client library, so programs
//! linked against it record `libpmix.so.2`, as they do with OpenPMIx's.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpmix.so.2");
    println!("cargo:rerun-if-changed=build.rs");
}
