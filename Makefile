# Quickstart entry points. Both install missing Debian packages first (apt), then configure and build.
BUILD ?= build
JOBS ?= 2
DEB_PKGS := build-essential cmake ninja-build pkg-config nlohmann-json3-dev libcli11-dev libeigen3-dev \
            libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin python3 \
            clang libclang-rt-dev time slurm-wlm
PTDP := $(BUILD)/tools/ptdp
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: deps configure build run test paper bench train-demo format clean gpu-carry gpu-dry-run \
        san-configure san-test fuzz-build fuzz hf-check \
        megatron-check megatron-data-check

# Hardening build (docs/fuzzing.md): clang, AddressSanitizer + UndefinedBehaviorSanitizer and
# libFuzzer instrumentation, in its own folder. It builds the fuzzers (fuzz/) and the unit tests
# below; `make test` runs those tests once and each fuzzer FUZZ_TEST_SECONDS over its seeds, both
# JOBS at a time (each is one single-threaded process), `make fuzz` each fuzzer FUZZ_SECONDS, one
# after another.
SAN_BUILD ?= build-san
FUZZ_SECONDS ?= 600
FUZZ_TEST_SECONDS ?= 5
# Longest first (under ASan, test sources at -O0, tests/CMakeLists.txt; 2026-11-30: runtime_test
# 27 s, planner_test 14 s, planner_uneven_test 7.5 s, core_ledger_test 6.5 s, the rest under 5 s
# each), so that JOBS at a time end together.
SAN_TESTS := runtime_test planner_test planner_uneven_test core_ledger_test profiler_test \
             simulator_refine_test simulator_test schedule_test core_test core_timeline_test \
             costmodel_test simulator_software_test kernels_test

deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; fi

# Unity builds of the test executables and the CLI (PTDP_UNITY_BUILD, CMakeLists.txt): less compiler
# time for `make test`; a developer build configured by hand still compiles each file alone.
$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPTDP_UNITY_BUILD=ON

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: plan the paper's 1T-parameter GPT on 3072 A100s of Selene, global batch 3072.
run: build
	$(PTDP) plan --model gpt-1t --cluster selene --gpus 3072 --global-batch 3072

# ctest runs more tests at once than there are cores: the mpirun tests leave cores idle while
# their ranks start and wait (on this 2-core machine, 2026-11-29, the 305 mpi-labelled tests took
# 318 s at -j 2 and 287 s at -j 4, one after the other on the same build).
CTEST_JOBS ?= $(shell echo $$(( $(JOBS) * 2 )))
test: build san-test
	cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS) --timeout 900
	FUZZ_JOBS=$(JOBS) fuzz/run.sh $(SAN_BUILD) $(FUZZ_TEST_SECONDS)

$(SAN_BUILD)/build.ninja: CMakeLists.txt
	CC=clang CXX=clang++ cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DPTDP_WITH_CUDA=OFF \
	  -DPTDP_WITH_MPI=OFF -DPTDP_FUZZ=ON -DPTDP_UNITY_BUILD=ON

san-configure: deps $(SAN_BUILD)/build.ninja

# The unit tests under the sanitizers (any UB aborts, leaks are errors), and the fuzzers.
san-test: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target $(SAN_TESTS) ptdp_fuzzers
	tests/run_sanitized.sh $(SAN_BUILD) $(JOBS) $(SAN_TESTS)

fuzz-build: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target ptdp_fuzzers

fuzz: fuzz-build
	fuzz/run.sh $(SAN_BUILD) $(FUZZ_SECONDS)

# ptdp against transformers' GPT2LMHeadModel (docs/checkpoints.md "Hugging Face GPT-2"): installs torch,
# transformers and safetensors from PyPI into $(BUILD)/hf-venv once (a few GB, so not in `make test`),
# then compares logits and losses of exported and imported models; PASS/FAIL lines, exit 1 on a FAIL.
hf-check: build
	bench/hf/hf_check.sh $(PTDP) $(BUILD)

# `ptdp tokenize --megatron PREFIX` against Megatron-Core's own IndexedDatasetBuilder and
# IndexedDataset (bench/megatron_data/check.sh): torch, numpy and megatron-core from PyPI into
# $(BUILD)/hf-venv once; PASS/FAIL per dataset, exit 1 on a FAIL.
megatron-data-check: build
	bench/megatron_data/check.sh $(PTDP) $(BUILD)

# `--emit megatron` flags of GPT and Llama plans through Megatron-LM's own parse_args and
# validate_args (tools/megatron_check.sh): needs a Megatron-LM checkout, MEGATRON_LM=/path (its
# parser is not on PyPI), and torch in $(BUILD)/megatron-venv (made once); without MEGATRON_LM it
# prints SKIPPED. PASS/FAIL per plan, exit 1 on a FAIL. Builds only ptdp.
MEGATRON_LM ?=
megatron-check: configure
	cmake --build $(BUILD) -j $(JOBS) --target ptdp
	MEGATRON_LM="$(MEGATRON_LM)" tools/megatron_check.sh $(PTDP) $(BUILD)

paper: build
	$(PTDP) paper

bench: build
	for b in $(BUILD)/bench/*/bench_*; do [ -x "$$b" ] && "$$b"; done

train-demo: build
	$(PTDP) tokenize --in /usr/share/common-licenses/GPL-3 --out $(BUILD)/gpl3.bin
	$(PTDP) plan --model tiny --cluster cpu --gpus 1 --global-batch 16 --fix tp=1,pp=1,dp=1,mbs=16,schedule=1f1b,recompute=none --software ptdp --out $(BUILD)/demo-plan.json
	$(PTDP) train --plan $(BUILD)/demo-plan.json --data $(BUILD)/gpl3.bin --steps 300 --lr 3e-3 --min-lr 3e-4 --warmup 30 --log $(BUILD)/demo-metrics.jsonl
	@tail -n 10 $(BUILD)/demo-metrics.jsonl | sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/' | \
	  awk '{s += $$1} END {printf "mean loss of the last 10 steps: %.3f nats/token (compare with the unigram entropy printed by tokenize above)\n", s / NR}'

# For a GPU session (docs/cuda.md): the Debian packages' files the GPU machine lacks, in .carry/
# (ignored; the device tool carries it), and the rehearsal of bench/gpu/run_all.sh on this machine.
gpu-carry: deps
	bench/gpu/gather_deps.sh .carry

gpu-dry-run: gpu-carry
	bench/gpu/run_all.sh out/gpu-dry-run --dry-run

format:
	git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
