# Two commands for a newcomer (README.md): `make run` and `make test`. Each does its own setup.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup configure build test run clean fuzz fuzz-build chaos recovery peer tokenize-bench

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@[ -f $(BUILD)/build.ninja ] || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The fuzz tests in ctest (label fuzz) run the harnesses of $(FUZZ_BUILD) about 5 s each; they
# are skipped (77) where clang++ with libFuzzer is absent.
test: build fuzz-build
	@cd $(BUILD) && PP_FUZZ_BIN_DIR=$(abspath $(FUZZ_BUILD))/bin \
	  ctest --output-on-failure -j $(JOBS) --timeout 600

# libFuzzer harnesses (tests/fuzz, docs/testing.md): a clang build with ASan + UBSan, then each
# harness for FUZZ_SECONDS on its seed corpus, one line of result each.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZERS = safetensors checkpoint job_spec executor hf_config llmc_shard tokenizer policy
fuzz-build: setup
	@if tests/fuzz/have_libfuzzer.sh; then \
	  [ -f $(FUZZ_BUILD)/build.ninja ] || cmake -S . -B $(FUZZ_BUILD) -G Ninja \
	    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CUDA_COMPILER=OFF \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPP_FUZZ=ON >/dev/null && \
	  cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers; \
	else echo "fuzz: no clang++ with libFuzzer, the fuzz harnesses are not built"; fi

fuzz: fuzz-build
	@tests/fuzz/have_libfuzzer.sh || { echo "fuzz: needs clang++ with libFuzzer"; exit 1; }
	@failed=0; for f in $(FUZZERS); do \
	  tests/fuzz/run_fuzzer.sh $$f $(FUZZ_SECONDS) $(FUZZ_BUILD)/bin || failed=1; \
	done; exit $$failed

# The chaos and load runs of bench/chaos (docs/testing.md), full size: a few minutes. The short
# version is the ctest test chaos_short. Extra flags: make chaos CHAOS_FLAGS=--seed=7.
CHAOS_FLAGS ?=
chaos: build
	@$(BUILD)/bin/chaos_bench --heartbeat_p99_ms=100 $(CHAOS_FLAGS)

# The recovery run of bench/chaos: kill-to-next-commit and goodput under kill -9 of workers, with a
# spare worker and elastic (docs/testing.md). Short: make recovery CHAOS_FLAGS=--short_run.
recovery: build
	@$(BUILD)/bin/chaos_bench --run=recovery $(CHAOS_FLAGS)

# The embedded default: ppcoord + 2 CPU workers on loopback train a small GPT (about 2 minutes on
# 2 cores), then everything stops. More workers: make run WORKERS=4.
WORKERS ?= 2
run: build
	@$(BUILD)/bin/ppctl up --workers=$(WORKERS)

# bench/peer: ours next to PyTorch on the same model, shapes and threads (bench/peer/README.md).
# Uses the torch venv the Hugging Face tests make, $(BUILD)/venv-hf (scripts/test-venv.sh --hf:
# PyPI, about 5.5 GB once). The full run takes about 75 minutes on 2 cores (estimated: three
# shapes, fp32 and bf16, torch.compile); the short one: make peer PEER_FLAGS=--quick (about 5).
# Other flags: make peer PEER_FLAGS="--shapes=b --precision=bf16 --threads=2".
PEER_FLAGS ?=
peer: build
	@venv="$$(bash scripts/test-venv.sh --hf $(abspath $(BUILD))/venv-hf)" && \
	  python3 bench/peer/peer_bench.py --ppctl=$(BUILD)/bin/ppctl --python="$$venv/bin/python" $(PEER_FLAGS)

# bench/tokenize: `ppctl tokenize` next to Hugging Face `tokenizers` on one core (bench/NOTES.md,
# "Tokenizer"), in the same venv. Extra flags: make tokenize-bench TOKENIZE_FLAGS="--repeats=9".
TOKENIZE_FLAGS ?=
tokenize-bench: build
	@venv="$$(bash scripts/test-venv.sh --hf $(abspath $(BUILD))/venv-hf)" && \
	  "$$venv/bin/python" bench/tokenize/tokenize_bench.py --ppctl=$(BUILD)/bin/ppctl $(TOKENIZE_FLAGS)

clean:
	rm -rf $(BUILD)
