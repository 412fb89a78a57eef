#!/usr/bin/env bash
# deploy/pmix-demos.sh OUT LIBDIR — builds the two `cohort run --pmix` test programs of
# cluster-tests/c/ into OUT, as cluster-tests/tests/pmix.rs does: OUT/pmix_demo (a
# PMIx program: `cc` against the system's OpenPMIx <pmix.h>, linked with cohort's
# LIBDIR/libpmix.so.2 and with hwloc) and OUT/mpi_demo (Open MPI's `mpicc`); and
# OUT/ompi-env.sh, a wrapper that makes a rank print what Open MPI gets from --pmix
# (one `OMPI rank=…` line) and then become its program. Used by the Slurm and ssh CI jobs
# (deploy/slurm/ci.sh, deploy/ssh/ci.sh).
#
# Exits 0 when both are built; 125 when a tool is missing (what is missing on stderr:
# the callers skip their --pmix jobs, loudly; `make setup` or Debian's libpmix-dev,
# libopenmpi-dev, openmpi-bin and gcc bring them); 1 when a build fails.
set -uo pipefail
out=${1:?usage: pmix-demos.sh OUT LIBDIR}
libdir=${2:?usage: pmix-demos.sh OUT LIBDIR}
src=$(cd "$(dirname "$0")/../cluster-tests/c" && pwd)

missing=()
command -v cc >/dev/null || missing+=("cc (gcc)")
command -v mpicc >/dev/null || missing+=("mpicc (libopenmpi-dev, openmpi-bin)")
include=""
for d in $(pkg-config --cflags-only-I pmix 2>/dev/null | tr ' ' '\n' | sed -n 's/^-I//p') \
    /usr/lib/x86_64-linux-gnu/pmix2/include /usr/include; do
    [[ -f $d/pmix.h ]] && { include=$d; break; }
done
[[ -z $include ]] && missing+=("pmix.h (libpmix-dev)")
[[ -f $libdir/libpmix.so.2 ]] || missing+=("cohort's $libdir/libpmix.so.2 (cargo build -p cohort-pmix)")
if ((${#missing[@]})); then
    echo "pmix-demos: missing: ${missing[*]}" >&2
    exit 125
fi
mkdir -p "$out"
if ! cc -std=gnu11 -Wall -Wextra -Werror -o "$out/pmix_demo" "$src/pmix_demo.c" \
    -I "$include" -L "$libdir" -l:libpmix.so.2 -lhwloc; then
    echo "pmix-demos: cc pmix_demo.c failed" >&2
    exit 1
fi
if ! mpicc -Wall -Werror -o "$out/mpi_demo" "$src/mpi_demo.c"; then
    echo "pmix-demos: mpicc mpi_demo.c failed" >&2
    exit 1
fi
cat >"$out/ompi-env.sh" <<'EOF'
#!/bin/sh
echo "OMPI rank=$COHORT_RANK node=$COHORT_NODE_NAME host=$(hostname) btl=${OMPI_MCA_btl-unset} if=${OMPI_MCA_btl_tcp_if_include-unset} schizo=${OMPI_MCA_schizo-unset} lib=${LD_LIBRARY_PATH%%:*}"
exec "$@"
EOF
chmod 755 "$out/ompi-env.sh"
