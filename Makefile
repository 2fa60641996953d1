# Two commands do all of the set-up (see README.md):
#   make run    builds the dev environment if needed and runs the main job
#   make test   builds it if needed and runs every check CI runs
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PACKAGES := $(sort $(wildcard packages/*))
LAYERS := ../shared/tools/check_layers.py
# tox finds Pythons 3.10-3.13 on PATH; pyenv's are added there when installed, missing ones are skipped.
empty :=
space := $(empty) $(empty)
TOX_PATH := $(subst $(space),:,$(strip $(PATH) $(wildcard $(HOME)/.pyenv/versions/3.1[0-3].*/bin)))
NO_TORCH_ENVS := plugins-py310,plugins-py311,plugins-py312,plugins-py313,cli-py310,cli-py311,cli-py312,cli-py313,estimate-py310,estimate-py311,estimate-py312,estimate-py313

.PHONY: run test test-fast tox-all gpu-check clean

$(VENV)/.installed: requirements-dev.txt $(addsuffix /pyproject.toml,$(PACKAGES))
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned: a bare requirement would pull a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -r requirements-dev.txt $(addprefix -e ,$(PACKAGES))
	touch $@

# The main job: `zero profile` of the stage-3-vs-stage-2 case (scaled-down Pythia, LoRA, 2 ranks): memory per
# phase and category, measured beside the estimate, every gap explained; also written to profile.html.
run: $(VENV)/.installed
	$(BIN)/zero report
	OMP_NUM_THREADS=1 $(BIN)/zero profile --model pythia-tiny --lora-rank 8 --ds-config examples/profile_ds_config.json \
		--stages 2,3 --memory-efficient-linear both --micro-batch 2 --seq-len 128 --steps 2 --html profile.html

# --recreate: tox installs the sibling packages from their folders and would otherwise keep a stale copy.
test: test-fast
	PATH="$(TOX_PATH)" $(BIN)/tox run-parallel --recreate --parallel 2 --parallel-no-spinner -e $(NO_TORCH_ENVS)

# The whole suite in the dev environment (every package installed), after the checks that need
# no tests: the import layering (.importlinter, always; ../shared's script too when there is one)
# and the types (mypy.ini).
test-fast: $(VENV)/.installed
	$(BIN)/lint-imports --no-logo .importlinter
	@if [ -f $(LAYERS) ]; then $(BIN)/python $(LAYERS) .; else echo "skipped $(LAYERS) (not found): the import-linter contracts in .importlinter cover the layering"; fi
	$(BIN)/mypy --config-file mypy.ini
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest

# The CUDA paths on one GPU (bench/gpu_check.py: parity on NCCL, zero profile against its dry run, pinned
# bandwidth, CPU offload's step against DeepSpeed's); exits 2 saying so where there is no GPU.
gpu-check: $(VENV)/.installed
	$(BIN)/python bench/gpu_check.py --json gpu_check.json

# Every package alone, including the torch ones (slower: each env installs torch).
tox-all: $(VENV)/.installed
	PATH="$(TOX_PATH)" $(BIN)/tox run

clean:
	rm -rf $(VENV) .tox .mypy_cache .import_linter_cache
