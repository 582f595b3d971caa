# Every target installs what it needs into its own virtualenv, idempotently.
PYTHON ?= python3
VENV := .venv
BENCH_VENV := .venv-bench
STAMP := $(VENV)/.installed
BENCH_STAMP := $(BENCH_VENV)/.installed

.PHONY: run test audit bench bench-beam demo-pubsub clean

# --compile-bytecode: the libraries' .pyc files are written once here (as pip does by default); without
# them every process compiles apache_beam, numpy, scipy … from source when bytecode writing is off
# (PYTHONDONTWRITEBYTECODE): import apache_beam 3 s of CPU instead of 1 s, measured
$(STAMP): setup.py
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check uv
	$(VENV)/bin/python -m uv pip install -q --compile-bytecode --python $(VENV)/bin/python -e '.[test]'
	touch $@

$(BENCH_STAMP): setup.py
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --disable-pip-version-check uv
	$(BENCH_VENV)/bin/python -m uv pip install -q --compile-bytecode --python $(BENCH_VENV)/bin/python -e '.[bench]'
	touch $@

# the Beam job on the DirectRunner over the built-in stream, then the report step
run: $(STAMP)
	$(VENV)/bin/python -m pipelines.dp_stream_cluster --output out --report

# the streaming job against a local Pub/Sub emulator; stops everything it started
demo-pubsub: $(STAMP)
	$(VENV)/bin/python -m pipelines.demo_pubsub

# two workers (pytest-xdist), one test file each at a time: a file's module-scoped fixtures (one shared
# pipeline for many checks) are built once; TEST_WORKERS=0 runs in this process
TEST_WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

# the statistical privacy audits (tests/audit/README.md) with 10x the trials `make test` runs
audit: $(STAMP)
	DPSTREAM_AUDIT_SCALE=10 $(VENV)/bin/python -m pytest -q tests/audit

bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/run_benchmark.py --out benchmarks/results

# the Beam job's throughput against the runner's floor and the engine (benchmarks/results/beam.md)
bench-beam: $(STAMP)
	$(VENV)/bin/python benchmarks/beam_benchmark.py --out benchmarks/results
	$(VENV)/bin/python benchmarks/beam_keys.py --out benchmarks/results  # CPU and buffered points per key, scale-out factor (beam_keys.md)

clean:
	rm -rf out .pytest_cache
