# DeepSpeed in its own environment (.venv-ds): the same torch==2.13.0 CPU build as .venv, cxlkit
# built into it, and DeepSpeed with no ops prebuilt (DS_BUILD_OPS=0: its cpu_adam op is
# JIT-built on first use by torch.utils.cpp_extension, a few minutes). That build needs a C++
# compiler (`c++`), Python's headers and ninja: ds-sysdeps installs the first two with apt-get
# when they are missing (we are root on CI), ninja comes from PyPI into .venv-ds (a DeepSpeed
# requirement), and test-deepspeed puts .venv-ds/bin first on PATH so torch finds it there.
# The accelerator is the CPU one (DS_ACCELERATOR=cpu); test-deepspeed runs tests/engines/test_deepspeed.py.
# cxlkit is the one `make build` compiled into .venv, made importable in .venv-ds by
# mk/cxlkit_into_venv.py (nothing else of .venv): no second compile of the C++ core.
DS_VENV := .venv-ds
DS_PY := $(DS_VENV)/bin/python
DS_STAMP := $(DS_VENV)/.ds-stamp
DS_DEPS := torch==2.13.0 numpy pytest 'scikit-build-core>=0.10' 'nanobind>=2.4' ninja 'cmake>=3.18'
DS_ENV := DS_ACCELERATOR=cpu CXLKIT_REQUIRE_DEEPSPEED=1 PATH="$(CURDIR)/$(DS_VENV)/bin:$$PATH"

.PHONY: ds-sysdeps deepspeed-env test-deepspeed
ds-sysdeps:
	@missing=""; command -v c++ >/dev/null 2>&1 || missing="g++"; \
	$(PY) -c 'import os, sysconfig, sys; \
	  sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
	  || missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update && apt-get install -y $$missing; \
	  else echo "DeepSpeed's cpu_adam JIT build needs:$$missing (apt-get install as root)"; exit 1; fi; \
	fi

$(DS_STAMP): mk/deepspeed.mk pyproject.toml | ds-sysdeps
	test -x $(DS_PY) || $(PY) -m venv $(DS_VENV)
	$(DS_PY) -m pip install --upgrade pip
	$(DS_PY) -m pip install $(DS_DEPS)
	DS_BUILD_OPS=0 DS_ACCELERATOR=cpu $(DS_PY) -m pip install deepspeed torch==2.13.0
	touch $@

deepspeed-env: $(DS_STAMP) build
	$(VPY) mk/cxlkit_into_venv.py $(DS_PY)

test-deepspeed: deepspeed-env ds-sysdeps
	$(DS_ENV) $(DS_PY) -m pytest -q -rs tests/engines/test_deepspeed.py

ENGINE_TESTS += test-deepspeed
