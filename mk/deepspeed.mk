# DeepSpeed in its own environment (.venv-ds): the same torch==2.13.0 CPU build as .venv, cxlkit
# built into it, and DeepSpeed with no ops prebuilt (DS_BUILD_OPS=0: its cpu_adam op is
# JIT-built by ninja on first use, a few minutes). The accelerator is the CPU one
# (DS_ACCELERATOR=cpu); test-deepspeed runs tests/test_deepspeed*.py there.
DS_VENV := .venv-ds
DS_PY := $(DS_VENV)/bin/python
DS_STAMP := $(DS_VENV)/.ds-stamp
DS_DEPS := torch==2.13.0 numpy pytest 'scikit-build-core>=0.10' 'nanobind>=2.4' ninja 'cmake>=3.18'

$(DS_STAMP): mk/deepspeed.mk pyproject.toml
	test -x $(DS_PY) || $(PY) -m venv $(DS_VENV)
	$(DS_PY) -m pip install --upgrade pip
	$(DS_PY) -m pip install $(DS_DEPS)
	DS_BUILD_OPS=0 DS_ACCELERATOR=cpu $(DS_PY) -m pip install deepspeed torch==2.13.0
	touch $@

.PHONY: deepspeed-env test-deepspeed
deepspeed-env: $(DS_STAMP)

test-deepspeed: $(DS_STAMP)
	@mkdir -p build
	flock build/.lock $(DS_PY) -m pip install --no-build-isolation --no-deps -e . \
	  --config-settings=build-dir=build/ds
	DS_ACCELERATOR=cpu $(DS_PY) -m pytest -q tests/test_deepspeed.py

ENGINE_TESTS += test-deepspeed
