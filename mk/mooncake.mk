# Mooncake Store (the level below the pool, cxlkit.kv.level2) in an environment of its own,
# .venv-mooncake, and the tests of the level against a real Mooncake master and store client
# (TCP transport on loopback).
#
# The wheel (mooncake-transfer-engine-non-cuda: master binary, store client, no CUDA) goes
# into a venv of its own, with its three requirements; that venv sees .venv's packages (torch,
# numpy, cxlkit editable) after its own through a .pth that runs site.addsitedir on .venv's
# site-packages, so .venv's own .pth files (the editable cxlkit hook) run too and no second
# native build is needed. vLLM loads the connector in its own processes, so the same wheel
# also goes into .venv-vllm (vllm-mooncake) for the two-pod engine test.
MOONCAKE_VENV := .venv-mooncake
MOONCAKE_PY := $(MOONCAKE_VENV)/bin/python
MOONCAKE_VERSION := 0.3.13.post1
MOONCAKE_PKG := mooncake-transfer-engine-non-cuda==$(MOONCAKE_VERSION)
MOONCAKE_STAMP := $(MOONCAKE_VENV)/.mooncake-stamp
MOONCAKE_TEST_ARGS ?=

.PHONY: mooncake-venv test-mooncake vllm-mooncake

$(MOONCAKE_STAMP): mk/mooncake.mk
	$(PY) -m venv $(MOONCAKE_VENV)
	$(MOONCAKE_PY) -m pip install $(MOONCAKE_PKG)
	$(VPY) -c 'import sysconfig; print("import site; site.addsitedir(%r)" % sysconfig.get_paths()["purelib"])' > \
	  "$$($(MOONCAKE_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-cxlkit-venv.pth"
	$(MOONCAKE_PY) -c 'import cxlkit, torch; from mooncake.store import MooncakeDistributedStore'
	touch $@

mooncake-venv: build $(MOONCAKE_STAMP)

test-mooncake: mooncake-venv
	$(MOONCAKE_PY) -m pytest -q -p no:cacheprovider $(MOONCAKE_TEST_ARGS) tests/kv/test_kv_level2.py \
	  tests/engines/test_kv_level2_mooncake.py

vllm-mooncake: vllm-venv
	$(VLLM_PY) -m pip install -c $(VLLM_PIN) $(MOONCAKE_PKG)

ENGINE_TESTS += test-mooncake
