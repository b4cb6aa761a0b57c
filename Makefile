# The two commands of the README: `make reproduce` (the main job) and `make test`.
# `make install` creates .venv and installs normlab with its test and hf extras; it is a no-op when nothing changed.
# `make test` also installs the parity references (install-ref) and requires them.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install install-ref install-slurm test reproduce clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "normlab needs Python >= 3.11")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools
	# torch first and pinned: the CPU build from this machine's disk, never a CUDA build from PyPI. Where pip has no
	# local CPU wheel (a stock Linux box: PyPI serves the multi-GB CUDA one), TORCH_INDEX names the CPU index:
	# make reproduce TORCH_INDEX=https://download.pytorch.org/whl/cpu
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	# the `hf` extra (transformers: Hugging Face BERT export/import) so that tests/test_hf.py runs rather than
	# skips; it needs no torch of its own, so the pinned CPU build above stays. Pinned to the release the tests
	# passed with, as the references are: the tests require it (tests/conftest.py, require_reference)
	$(PY) -m pip install -q -e '.[test,hf]' transformers==5.24.0
	touch $(STAMP)

# The references of tests/test_parity_refs.py (pyproject's test-ref group; x-transformers is also the peer of
# the benchmark's test) without their dependencies: torchscale's timm pin would bring torchvision and another
# torch. Pinned to the versions the parity tests passed with, so that an upstream release cannot change CI's
# result. The import check fails here, naming the module, when one of them cannot be used.
REF_STAMP := $(VENV)/.installed-ref

install-ref: $(REF_STAMP)

# after the Makefile: a reference added here reaches a venv installed before it (pip skips the pinned ones present)
$(REF_STAMP): $(STAMP) Makefile
	$(PY) -m pip install -q --no-deps torchscale==0.3.0 fairscale==0.4.0 x-transformers==2.31.10 einops==0.8.2 \
		einx==0.4.3 frozendict==2.5.1 loguru==0.7.3 torch-einops-utils==0.2.0 nGPT-pytorch==0.2.16 \
		rotary-embedding-torch==0.9.1
	$(PY) -c 'import fairscale, x_transformers, torchscale.architecture.config, nGPT_pytorch'
	# the grid launchers' engines (the `ray` and `slurm` extras), so that tests/test_launchers.py runs its grids
	# through a 2-worker Ray cluster and submitit rather than skipping; pinned as the references are. With their
	# dependencies (none of them is torch).
	$(PY) -m pip install -q ray==2.60.0 submitit==1.5.4
	$(PY) -c 'import ray, submitit'
	touch $(REF_STAMP)

# Every test runs: the references are installed and NORMLAB_REQUIRE_REFS=1 turns an absent one into a failure
# (tests/conftest.py, require_reference) rather than a skip. The SLURM test of tests/test_launchers.py runs where
# slurm-wlm's daemons are installed (install-slurm; .ci/run does it as root) and skips, saying so, elsewhere.
# The suite runs on pytest-xdist's workers, one per logical CPU up to 4 (each test on one thread, tests/conftest.py):
# 9 min 42 s against 14 min 24 s in one process on a 2-core AMD EPYC Zen 4. --dist loadgroup with conftest's groups
# keeps each file's tests on one worker and the files that start a Ray cluster on the same one.
test: install-ref
	NORMLAB_REQUIRE_REFS=1 $(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadgroup

# Debian's single-node SLURM for tests/test_launchers.py (it starts its own slurmctld and slurmd from a config in
# a temporary directory, without systemd or munge); needs root and apt-get. Not part of `make test`: apt is the
# system's, not this project's. .ci/run runs it when it can, and then requires the test (NORMLAB_REQUIRE_SLURM=1).
install-slurm:
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client

# The main job: the decisive contrasts at the quick scale (measured ~116 min on 2 Zen 5 cores with AVX-512 BF16,
# ~2 h with AMX and ~2.7 h on a Zen 4, estimated; it prints its own estimate from a probe of this machine first)
# and the report reproduce/quick/report/index.html. Re-running it skips finished runs and resumes a killed one.
reproduce: install
	$(PY) -m normlab reproduce --scale quick --out reproduce/quick

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
