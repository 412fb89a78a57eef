# The two entry points (see README.md): `make demo` and `make test`.
# Both install missing system packages and the Rust toolchain first.

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo

.PHONY: setup demo test build bench lint clean

setup:
	@scripts/setup.sh

# A 6-rank job over 3 emulated nodes (3 cohortd processes, each on its own loopback
# address) constructing one group with the collective method.
demo: setup
	$(CARGO) build --release --bins --examples
	target/release/cohort run --nodes 3 -n 6 --tag-output target/release/examples/demo

# The whole suite: unit, property and integration tests (real cohortd processes).
test: setup
	$(CARGO) build --workspace --bins --examples
	$(CARGO) test --workspace

build: setup
	$(CARGO) build --release --workspace --bins --examples

# The benchmark tables quoted in the issues' closing notes.
bench: build
	for n in 2 4 8; do target/release/cohort run -n $$n target/release/cohort-bench fence; done
	for n in 3 6; do target/release/cohort run --nodes 3 -n $$n target/release/cohort-bench fence; done
	for m in collective bootstrap invite; do \
	  for n in 2 4 8; do target/release/cohort run -n $$n target/release/cohort-bench group --method $$m; done; \
	  for n in 3 6; do target/release/cohort run --nodes 3 -n $$n target/release/cohort-bench group --method $$m; done; \
	done

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
