# Every target that runs something first builds the venv in .venv (once; again when the requirements change).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUITE ?= suites/smoke.json
K ?=
# Every shipped suite; on a machine without a GPU `make suites` keeps the cases tagged cpu.
ALL_SUITES := suites/smoke.json suites/k26-tp8-parity.json suites/kernel-parity.json suites/replay.json \
	suites/k26-verify.json suites/e2e.json
HAS_CUDA := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
RESULTS := results

.PHONY: test test-slow smoke suite suites lint env kernel-check device-check device-wheels wheel-check clean \
	server-parity

# `make test`: the quick tier, a few minutes on 2 cores. `make test-slow`: the whole-suite checks (every
# kernel-parity case on the emulation, the model baselines, the self-test, the nvcc builds); CI runs both.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider -m slow

smoke: $(STAMP)
	$(BIN)/ddbench run suites/smoke.json --json $(RESULTS)/smoke.json --junit $(RESULTS)/smoke.xml

suite: $(STAMP)
	$(BIN)/ddbench run $(SUITE) $(if $(K),-k "$(K)") --json $(RESULTS)/$(notdir $(SUITE))

suites: $(STAMP)
ifeq ($(HAS_CUDA),1)
	$(BIN)/ddbench run $(ALL_SUITES) --json $(RESULTS)/suites.json --junit $(RESULTS)/suites.xml
else
	$(BIN)/ddbench run $(ALL_SUITES) -k cpu --json $(RESULTS)/suites.json --junit $(RESULTS)/suites.xml
endif

lint: $(STAMP)
	$(BIN)/ruff check ddbench tests
	$(BIN)/ruff format --check ddbench tests
	$(BIN)/lint-imports

# A real SGLang server twice (Triton, then the kernel through the plugin) on a local model folder: make
# server-parity MODEL=/models/DeepSeek-V2-Lite. Needs a GPU and SGLang's serving stack (docs/e2e.md).
server-parity: $(STAMP)
	$(BIN)/ddbench server-parity "$(MODEL)" --out $(RESULTS)/server-parity

env: $(STAMP)
	$(BIN)/ddbench env

# nvcc builds the kernels for sm_120 and sm_90: no spills, <= 255 registers, <= 99 KB smem, HMMA and no HGMMA/UTC*.
kernel-check: $(STAMP)
	$(BIN)/ddbench kernel-check --json $(RESULTS)/kernel-check.json

# On a GPU machine (the device tool's H200): the machine's own python3 and torch, no venv and no network;
# wheels it lacks travel in .whl/ (make device-wheels here). Writes $$OUT/device-check.json.
device-check:
	bash scripts/device-check.sh

device-wheels:
	bash scripts/device-wheels.sh

# The wheel alone in a fresh venv finds its kernel sources in site-packages, every tracked kernels/ file.
wheel-check: $(STAMP)
	bash scripts/wheel-check.sh $(BIN)/python

$(STAMP): pyproject.toml requirements/torch-cpu.txt requirements/sglang-kernel.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
ifeq ($(HAS_CUDA),1)
	$(BIN)/python -m pip install -q torch==2.13.0 ninja nvidia-ml-py
else
	$(BIN)/python -m pip install -q -r requirements/torch-cpu.txt
endif
	$(BIN)/python -m pip install -q --no-deps sglang==0.5.23
	@echo "sglang is installed without its ~65 serving dependencies on purpose (only its kernel module is used):"
	@echo "pip's conflict check is turned off for the next two steps, and 'pip check' would list them."
	$(BIN)/python -m pip install -q --no-warn-conflicts -r requirements/sglang-kernel.txt
	@# -qq: setuptools' informational 'Editable installation' banner is not a problem; errors still print.
	$(BIN)/python -m pip install -qq --no-warn-conflicts -e '.[dev]'
	touch $@

clean:
	rm -rf $(VENV) $(RESULTS) .pytest_cache .benchmarks
