#!/usr/bin/env bash
# Installs cohort into a prefix, or removes it from there: `make install` / `make
# uninstall` call this, and so does cluster-tests/tests/install.rs.
#
#   scripts/install.sh install      build (unless NO_BUILD=1), then copy into the prefix
#   scripts/install.sh uninstall    remove every file `install` puts there
#
# Settings, from the environment (the Makefile passes its variables of the same names):
#   PREFIX            where cohort goes (default /usr/local); must be absolute
#   DESTDIR           staging root for packagers: files go to DESTDIR/PREFIX/…, while
#                     everything that names a path (cohort.pc) still says PREFIX
#   PROFILE           the cargo profile whose build is installed: release (default),
#                     debug, or a custom profile's name
#   NO_BUILD=1        install what is already built; do not run cargo (e.g. `make build`
#                     as yourself, then `sudo make install NO_BUILD=1`)
#   CARGO_TARGET_DIR  cargo's target directory (default: target/ of this checkout)
#   CARGO             the cargo command (default: cargo)
#
# Layout (nothing else is written; uninstall removes exactly these):
#   PREFIX/bin/cohort, cohortd, cohort-bench
#   PREFIX/include/cohort.h
#   PREFIX/lib/libcohort.so.VERSION            the C library (built as libcohort_c.so)
#   PREFIX/lib/libcohort.so.MAJOR -> …VERSION  its soname, which programs record
#   PREFIX/lib/libcohort.so -> …MAJOR          for -lcohort
#   PREFIX/lib/pkgconfig/cohort.pc             -I, -L, -l and an rpath to PREFIX/lib
#   PREFIX/lib/cohort/pmix/libpmix.so.2        cohort's PMIx library, private: in
#   PREFIX/lib/cohort/pmix/libpmix.so -> …so.2 PREFIX/lib it would shadow the system's
#                                              OpenPMIx for every program. `cohort run
#                                              --pmix` finds it from bin/ by itself.
set -euo pipefail

action=${1:-}
case "$action" in
    install | uninstall) ;;
    *)
        echo "usage: $0 install|uninstall  (settings: PREFIX, DESTDIR, PROFILE, NO_BUILD)" >&2
        exit 2
        ;;
esac

repo=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
PROFILE=${PROFILE:-release}
NO_BUILD=${NO_BUILD:-}
CARGO=${CARGO:-cargo}

die() {
    echo "install.sh: $*" >&2
    exit 1
}

case "$PREFIX" in
    /*) ;;
    *) die "PREFIX must be an absolute path, not '$PREFIX'" ;;
esac
PREFIX=${PREFIX%/}
[ -n "$PREFIX" ] || die "PREFIX=/ is not supported; use PREFIX=/usr"

# The workspace version names the installed library; its major number is the soname's
# (runtime/capi/build.rs sets the same from the crate's version).
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' "$repo/Cargo.toml")
[ -n "$version" ] || die "cannot read the workspace version from $repo/Cargo.toml"
soname="libcohort.so.${version%%.*}"

root="$DESTDIR$PREFIX"
bindir="$root/bin"
libdir="$root/lib"
incdir="$root/include"
pcdir="$libdir/pkgconfig"
pmixdir="$libdir/cohort/pmix"
bins=(cohort cohortd cohort-bench)

if [ "$action" = uninstall ]; then
    for b in "${bins[@]}"; do rm -f -- "$bindir/$b"; done
    rm -f -- "$incdir/cohort.h" \
        "$libdir/libcohort.so" "$libdir/$soname" "$libdir/libcohort.so.$version" \
        "$pcdir/cohort.pc" \
        "$pmixdir/libpmix.so" "$pmixdir/libpmix.so.2"
    # cohort's own directories go when empty; the standard ones (bin, lib, include,
    # lib/pkgconfig) stay, as they may have been there before.
    for d in "$pmixdir" "$libdir/cohort"; do
        if [ -d "$d" ]; then rmdir -- "$d" 2>/dev/null || echo "install.sh: left $d (not empty)" >&2; fi
    done
    echo "install.sh: removed cohort from $root"
    exit 0
fi

case "$PROFILE" in
    debug | dev) profile_dir=debug profile_arg=() ;;
    *) profile_dir=$PROFILE profile_arg=(--profile "$PROFILE") ;;
esac
target=${CARGO_TARGET_DIR:-$repo/target}
case "$target" in /*) ;; *) target="$repo/$target" ;; esac
built="$target/$profile_dir"

if [ "$NO_BUILD" != 1 ]; then
    (cd "$repo" && "$CARGO" build "${profile_arg[@]}" -p cohort-launcher -p cohort-server \
        -p cohort-bench -p cohort-capi -p cohort-pmix)
fi

missing=()
for f in "${bins[@]}" libcohort_c.so libpmix.so; do
    [ -f "$built/$f" ] || missing+=("$built/$f")
done
if [ ${#missing[@]} -gt 0 ]; then
    die "not built: ${missing[*]} (build with \`make build\`, or \`cargo build --workspace\` for PROFILE=debug, or install without NO_BUILD=1)"
fi
# A build from before the library had its soname would install a library that programs
# linked against it could not find by name.
if command -v readelf >/dev/null 2>&1; then
    got=$(readelf -d "$built/libcohort_c.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
    [ "$got" = "$soname" ] ||
        die "$built/libcohort_c.so has soname '${got:-none}', not $soname: rebuild it (cargo build -p cohort-capi)"
fi

install -d -m 0755 "$bindir" "$incdir" "$pcdir" "$pmixdir"
for b in "${bins[@]}"; do
    install -m 0755 "$built/$b" "$bindir/$b"
done
install -m 0644 "$repo/runtime/capi/include/cohort.h" "$incdir/cohort.h"
install -m 0755 "$built/libcohort_c.so" "$libdir/libcohort.so.$version"
ln -sfn "libcohort.so.$version" "$libdir/$soname"
ln -sfn "$soname" "$libdir/libcohort.so"
install -m 0755 "$built/libpmix.so" "$pmixdir/libpmix.so.2"
ln -sfn libpmix.so.2 "$pmixdir/libpmix.so"

pc=$(mktemp)
trap 'rm -f "$pc"' EXIT
cat >"$pc" <<EOF
# cohort's C interface. Programs record the soname $soname; the rpath in Libs finds it
# in \${libdir} at run time (else put \${libdir} on LD_LIBRARY_PATH, or in ld.so.conf).
# cohort's own PMIx library (libpmix.so.2) is in \${pmixlibdir}, used by \`cohort run --pmix\`.
prefix=$PREFIX
exec_prefix=\${prefix}
bindir=\${exec_prefix}/bin
libdir=\${exec_prefix}/lib
includedir=\${prefix}/include
pmixlibdir=\${libdir}/cohort/pmix

Name: cohort
Description: C interface of the cohort HPC runtime (PMIx-style process groups)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lcohort
EOF
install -m 0644 "$pc" "$pcdir/cohort.pc"

echo "install.sh: installed cohort $version ($profile_dir build) into $root:"
echo "  bin/{cohort,cohortd,cohort-bench} include/cohort.h lib/libcohort.so{,.${version%%.*},.$version}"
echo "  lib/pkgconfig/cohort.pc lib/cohort/pmix/libpmix.so{,.2}"
