# The long runs of the pool fuzzers: tests/fuzz/fuzz_v2.py (every v2 structure, static and
# live, each trial's operations in forked children with a timeout) prints its counts and
# writes build/fuzz_v2.json (per structure and outcome, known findings, new ones with the
# command that replays each). The default suite runs a short one (tests/fuzz/test_fuzz_v2.py).
#   make fuzz FUZZ_TRIALS=5000 FUZZ_SEED=1
FUZZ_TRIALS ?= 2000
FUZZ_SEED ?= 1
FUZZ_TIMEOUT ?= 10
FUZZ_ARGS ?=
.PHONY: fuzz
fuzz: build
	$(VPY) tests/fuzz/fuzz_v2.py --trials $(FUZZ_TRIALS) --seed $(FUZZ_SEED) \
	  --timeout $(FUZZ_TIMEOUT) --out build/fuzz_v2.json $(FUZZ_ARGS)
