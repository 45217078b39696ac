# hermes-stack developer and user entry points. `make help` lists them.
# Targets call `python -m hermes_stack ...`; the Makefile only provisions (venv, Docker) and dispatches.
SHELL := /bin/bash
.DEFAULT_GOAL := help

ALGO ?= grpo
DEVICE ?= auto
MODEL ?=
REPLICAS ?=
UNLOCK ?=
SERVICE ?=
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HS := $(PY) -m hermes_stack
STAMP := $(VENV)/.installed
# pip's notice about local index folders that lack a package (a machine's pip config); real errors still show
PIP_NOISE := is neither a file nor a directory
# MODEL=smollm2-135m: the catalog's real model (hermes_stack/modelcore/catalog.py) instead of the CPU tiny model
# A value as one shell word, whatever it holds: a quote or a space typed into MODEL= or SERVICE= reaches the
# controller, which names what is wrong, instead of breaking the recipe's shell line.
q = '$(subst ','"'"',$(1))'
MODEL_ARG := $(if $(MODEL),--model $(call q,$(MODEL)),)
# REPLICAS=N: N inference replicas behind SGLang's router (docs/scaling.md); unset: settings inference.replicas
MODEL_ARG += $(if $(REPLICAS),--replicas $(REPLICAS),)
# UNLOCK=1: locked settings may change (the controller's --unlock; docs/configuration.md)
MODEL_ARG += $(if $(filter 1,$(UNLOCK)),--unlock,)
# status, logs, down, report: ALGO as given, else the controller's default, the stack the last `up` here started
STACK_ALGO := $(if $(filter command line environment environment override override,$(origin ALGO)),--algo $(ALGO),)

# Checked here, before the controller runs: an empty value would reach the CLI as a missing option, and a variable
# in the wrong case (algo=ppo) would be ignored, silently running the default.
MAKE_VARS := ALGO DEVICE MODEL SERVICE VOLUMES PYTHON REPLICAS UNLOCK
comma := ,
space := $(subst ,, )
$(foreach v,$(filter-out $(MAKE_VARS),$(foreach w,$(.VARIABLES),$(if $(filter command line,$(origin $(w))),$(w)))),\
  $(if $(filter $(shell echo '$(v)' | tr a-z A-Z),$(MAKE_VARS)),\
    $(error $(v)=$($(v)): found a variable in the wrong case, expected $(shell echo '$(v)' | tr a-z A-Z)=$($(v)). Hint: make variables are case-sensitive; $(v) would be ignored and the default used)))
# A variable make does not know (VOLUME=1, MODLE=..., SERVICES=trainer) was ignored too: `make down VOLUME=1` kept
# the volumes, `make up REPLICA=2` started one replica. The hint: the known name that starts with the same 3 letters.
# Passed through as before: the controller's own HERMES_* and pytest's PYTEST_*, and anything from a parent make.
ifeq ($(MAKELEVEL),0)
$(foreach v,$(filter-out $(MAKE_VARS) HERMES_% PYTEST_%,$(foreach w,$(.VARIABLES),$(if $(filter command line,$(origin $(w))),$(w)))),\
  $(if $(filter $(shell echo '$(v)' | tr a-z A-Z),$(MAKE_VARS)),,\
    $(error $(v)=$($(v)): found a variable make does not know, expected one of $(subst $(space),$(comma) ,$(MAKE_VARS)). Hint: $(or $(addprefix did you mean ,$(addsuffix ?,$(firstword $(filter $(shell echo '$(v)' | cut -c1-3 | tr a-z A-Z)%,$(MAKE_VARS))))),an environment variable goes before make: $(v)=... make <target>))))
endif
# A word where a VAR=value belongs (`make up ppo`, `make logs trainer`) is a goal make runs after the first one: `up`
# ran in full (with ALGO=grpo) before make said there was no rule for `ppo`.
MAKE_GOALS := help venv docker images validate up dry-run status report logs down render bench-stack test test-unit lint bench
WORD_HINT = $(if $(filter ppo grpo,$(1)),did you mean ALGO=$(1)?,$(if $(filter atropos inference trainer environment router gateway-check inference-%,$(1)),did you mean SERVICE=$(1)?,$(if $(filter cpu gpu auto,$(1)),did you mean DEVICE=$(1)?,make help lists the targets)))
ifneq ($(filter-out $(MAKE_GOALS) $(STAMP),$(MAKECMDGOALS)),)
$(error $(firstword $(filter-out $(MAKE_GOALS) $(STAMP),$(MAKECMDGOALS))): found a word make does not know as a target, expected a target ($(subst $(space),$(comma) ,$(MAKE_GOALS))) and VAR=value settings. Hint: $(call WORD_HINT,$(firstword $(filter-out $(MAKE_GOALS) $(STAMP),$(MAKECMDGOALS)))))
endif
ifeq ($(strip $(ALGO)),)
$(error ALGO: found an empty value, expected ALGO=ppo or ALGO=grpo. Hint: leave ALGO out for the default, grpo)
endif
ifneq ($(filter-out ppo grpo,$(ALGO)),)
$(error ALGO=$(ALGO) is not an algorithm hermes-stack knows; expected ALGO=ppo or ALGO=grpo)
endif
ifneq ($(words $(ALGO)),1)
$(error ALGO=$(ALGO): found $(words $(ALGO)) algorithms, expected one: ALGO=ppo or ALGO=grpo. Hint: one stack per make up; run the other in a second checkout)
endif
# Before `make up` provisions Docker: the controller would refuse it only after that.
# (make's own functions, no shell: a quote in the value cannot break the check)
without_digits = $(subst 0,,$(subst 1,,$(subst 2,,$(subst 3,,$(subst 4,,$(subst 5,,$(subst 6,,$(subst 7,,$(subst \
  8,,$(subst 9,,$(1)))))))))))
ifneq ($(REPLICAS),)
ifneq ($(words $(REPLICAS))$(call without_digits,$(REPLICAS))$(filter 0%,$(REPLICAS)),1)
$(error REPLICAS=$(REPLICAS): found a value that is no number of replicas, expected REPLICAS=1, 2, ... Hint: leave REPLICAS out for settings inference.replicas)
endif
endif
ifneq ($(filter-out 0 1,$(UNLOCK)),)
$(error UNLOCK=$(UNLOCK): found a value make up does not know, expected UNLOCK=1 (locked settings may change) or UNLOCK=0. Hint: leave UNLOCK out to keep them locked)
endif
ifneq ($(filter-out 0 1,$(VOLUMES)),)
$(error VOLUMES=$(VOLUMES): found a value make down does not know, expected VOLUMES=1 (delete the checkpoints) or VOLUMES=0. Hint: leave VOLUMES out to keep them)
endif
ifeq ($(strip $(DEVICE)),)
$(error DEVICE: found an empty value, expected DEVICE=auto, cpu or gpu. Hint: leave DEVICE out for the default, auto)
endif
ifneq ($(filter-out auto cpu gpu,$(DEVICE)),)
$(error DEVICE=$(DEVICE): found a device hermes-stack does not know, expected DEVICE=auto, cpu or gpu. Hint: auto picks gpu when nvidia-smi finds one and Docker can use it (NVIDIA Container Toolkit))
endif

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  make %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "hermes-stack needs Python >= 3.11; set PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip 2> >(grep -v "$(PIP_NOISE)" >&2)
	$(VENV)/bin/pip install -q --no-deps -r requirements.lock 2> >(grep -v "$(PIP_NOISE)" >&2)
	$(VENV)/bin/pip install -q --no-deps -e . 2> >(grep -v "$(PIP_NOISE)" >&2)
	@touch $(STAMP)

.PHONY: venv
venv: $(STAMP) ## Create the project's virtual environment (.venv)

.PHONY: docker
docker: ## Provision Docker Engine + Compose v2 when missing, and start dockerd
	@bash scripts/provision-docker.sh

.PHONY: images
images: venv docker ## Build the three images (base image and wheelhouse made first when missing)
	$(HS) build --algo $(ALGO) --device $(DEVICE)

.PHONY: validate
validate: venv ## Validate configs and key file: make validate ALGO=grpo
	$(HS) validate --algo $(ALGO) --device $(DEVICE) $(MODEL_ARG)

.PHONY: up
up: venv docker ## Validate, build, start the stack, dry-run, then train: make up ALGO=grpo [MODEL=smollm2-135m] [REPLICAS=2]
	$(HS) up --algo $(ALGO) --device $(DEVICE) $(MODEL_ARG)

.PHONY: dry-run
dry-run: venv docker ## Start the stack up to the dry-run stage only
	$(HS) dry-run --algo $(ALGO) --device $(DEVICE) $(MODEL_ARG)

.PHONY: status
status: venv ## Health, training step, reward trend, last checkpoint
	$(HS) status $(STACK_ALGO)

.PHONY: report
report: venv ## PNG + HTML of the run's metrics (.hermes/reports/<algo>/)
	$(HS) report $(STACK_ALGO)

.PHONY: logs
logs: venv ## Logs of one service: make logs SERVICE=trainer
	$(HS) logs $(STACK_ALGO) $(if $(SERVICE),$(call q,$(SERVICE)),)

.PHONY: down
down: venv ## Stop the stack (volumes kept; make down VOLUMES=1 removes them)
	$(HS) down $(STACK_ALGO) $(if $(filter 1,$(VOLUMES)),--volumes,)

.PHONY: render
render: venv ## Print the exact compose commands and the merged config (secrets redacted)
	$(HS) render --algo $(ALGO) --device $(DEVICE) $(MODEL_ARG)

.PHONY: bench-stack
bench-stack: venv docker ## Time up->healthy+dry-run and a code-only rebuild (bench/stack_timing.py)
	$(PY) bench/stack_timing.py --algo $(ALGO)

.PHONY: test
test: venv docker ## Run every test tier: unit, static, docker (provisions what is missing)
	@bash scripts/run-tests.sh

.PHONY: test-unit
test-unit: venv ## Quick local loop: unit and static tiers only (no Docker); make test stays the CI command
	$(PY) -m pytest -q tests/unit tests/static

.PHONY: lint
lint: venv ## ruff
	$(VENV)/bin/ruff check hermes_stack tests bench

.PHONY: bench
bench: venv ## Print the benchmark figures (see bench/)
	$(PY) bench/validate_speed.py
