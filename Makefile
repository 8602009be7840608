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

# The embedded default: ppcoord + 2 CPU workers on loopback train a small GPT (about 2 minutes on
# 2 cores), then everything stops. More workers: make run WORKERS=4.
WORKERS ?= 2
run: build
	@$(BUILD)/bin/ppctl up --workers=$(WORKERS)

clean:
	rm -rf $(BUILD)
