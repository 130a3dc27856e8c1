# Two commands on a fresh machine: `make serve` and `make test`.
# Each checks the Debian packages it needs first (scripts/system_deps.sh: installed when run as
# root with apt-get, else one message with the command to run), then builds .venv from
# requirements.lock, the versions CI tested (scripts/lock.sh refreshes it).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
LOCK   := requirements.lock
# what `make test` hands pytest, e.g. make test PYTEST_ARGS=tests/eval
PYTEST_ARGS ?=
# an index with the CPU torch wheel where pip's configured indexes lack it, e.g.
# make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: serve test install system-deps-serve system-deps-test lock bench clean

system-deps-serve:
	@PYTHON=$(PYTHON) scripts/system_deps.sh serve

system-deps-test:
	@PYTHON=$(PYTHON) scripts/system_deps.sh test

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, alone and pinned by the lock: 2.13.0 is the CPU wheel; letting a dependency pick
# torch pulls CUDA builds. Then the project with both extras, every version from the lock.
$(VENV)/.installed: pyproject.toml $(LOCK) | $(BIN)/activate
	$(BIN)/pip install -q -c $(LOCK) torch $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -c $(LOCK) -e '.[test,cluster]'
	$(BIN)/pip install -q -c $(LOCK) --no-deps aisfx  # aiSFX's reference module for the parity test; its pins (numpy 1.23) would break the venv
	touch $@

# the venv alone; serve and test check their system packages before it
install: $(VENV)/.installed

# RECALL_DEMO=1: the first start seeds demo collections so the page at / works at once
serve: system-deps-serve
	@$(MAKE) --no-print-directory install
	RECALL_DEMO=$${RECALL_DEMO:-1} $(BIN)/recall serve

test: system-deps-test
	@$(MAKE) --no-print-directory install
	$(BIN)/python -m pytest -q -ra $(PYTEST_ARGS)

lock:
	scripts/lock.sh

bench: install
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache
