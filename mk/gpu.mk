# The GPU check: every cxlkit GPU path once, in minutes, on a machine with a CUDA device (copies
# by source tier, pinned vs pageable; a TieredAdamW step vs torch's CPU offload; PrefixCache
# TTFT; the vLLM connector's staging copies; the gpu-marked tests). It needs no .venv there:
# with none, the machine's python3 builds cxlkit from this tree (bench/gpu_check.py, into
# build/gpu-check/site). Without CUDA it runs the CPU halves and says what it skipped.
# Results: $(OUT)/gpu-check.json when OUT is set, else build/gpu-check/gpu-check.json.
GPU_CHECK_PY ?= $(if $(wildcard $(VPY)),$(VPY),$(PY))
GPU_CHECK_ARGS ?=

.PHONY: gpu-check
gpu-check:
	$(GPU_CHECK_PY) bench/gpu_check.py $(GPU_CHECK_ARGS)
