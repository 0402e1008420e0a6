# bench/subgroups.py and its independent reference, fio (Debian). Not an engine test: the
# bench is run by hand (`make -f Makefile bench-subgroups`), its figures go to docs/subgroups.md.
.PHONY: bench-subgroups-deps bench-subgroups
bench-subgroups-deps:
	@if ! command -v fio >/dev/null 2>&1; then apt-get update && apt-get install -y fio; fi

SUBGROUPS_BENCH_ARGS ?= --params 96M --subgroup 12M --steps 4
bench-subgroups: build bench-subgroups-deps
	$(VPY) bench/subgroups.py $(SUBGROUPS_BENCH_ARGS)
