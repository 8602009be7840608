# Two commands for a newcomer (README.md): `make run` and `make test`. Each does its own setup.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup configure build test run clean

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@[ -f $(BUILD)/build.ninja ] || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

run: build
	@$(BUILD)/bin/ppctl plan --schedule=1f1b --stages=4 --microbatches=8 --format=ascii

clean:
	rm -rf $(BUILD)
