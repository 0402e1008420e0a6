# bench/subgroups.py and its independent reference, fio (Debian), and DeepSpeed's ZeRO-3
# engine from .venv-ds (mk/deepspeed.mk; its cpu_adam and async_io ops are JIT-built into
# build/ds-ext on first use, minutes; MAX_JOBS=2 keeps the compilers within memory). Not an
# engine test: the bench is run by hand (`make bench-subgroups`), its figures go to
# docs/subgroups.md.
.PHONY: bench-subgroups-deps bench-subgroups
bench-subgroups-deps:
	@if ! command -v fio >/dev/null 2>&1; then apt-get update && apt-get install -y fio; fi
	@if ! dpkg -s libaio-dev >/dev/null 2>&1; then apt-get update && apt-get install -y libaio-dev; fi

SUBGROUPS_BENCH_ARGS ?= --params 48M --subgroup 3M --steps 3 --runs 3 --cache 6
bench-subgroups: build bench-subgroups-deps $(DS_STAMP)
	MAX_JOBS=2 $(VPY) bench/subgroups.py $(SUBGROUPS_BENCH_ARGS) --deepspeed-python $(DS_PY)
