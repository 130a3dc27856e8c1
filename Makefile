# Two commands on a fresh machine: `make serve` and `make test`.
# Each checks the Debian packages it needs first (scripts/system_deps.sh: installed when run as
# root with apt-get, else one message with the command to run), then builds .venv from
# requirements.lock, the versions CI tested, each with the sha256 of its file (scripts/lock.sh
# refreshes it).
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

.PHONY: serve test install pip-check system-deps-serve system-deps-test lock bench clean

system-deps-serve:
	@PYTHON=$(PYTHON) scripts/system_deps.sh serve

system-deps-test:
	@PYTHON=$(PYTHON) scripts/system_deps.sh test

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# Every package from the lock, hash-checked (--require-hashes: pip refuses a file whose sha256 is not
# the lock's): first pip itself, then the whole lock with --no-deps (it is complete: the project's
# dependencies with both extras, setuptools to build it, and aisfx, which is in it for the parity
# test but whose own pins, numpy 1.23 among them, would break the venv). torch's hash is the CPU
# wheel's (2.13.0+cpu), so no CUDA build can slip in. Last the project itself, which has no hash
# (an editable folder): --no-deps, built by the lock's setuptools (--no-build-isolation).
$(VENV)/.installed: pyproject.toml $(LOCK) | $(BIN)/activate
	grep -E '^pip==' $(LOCK) >$(VENV)/pip.lock
	$(BIN)/pip install -q --require-hashes --no-deps -r $(VENV)/pip.lock
	$(BIN)/pip install -q --require-hashes --no-deps -r $(LOCK) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@$(MAKE) --no-print-directory pip-check
	touch $@

# `pip check`: every installed package's requirements are met (a dependency pyproject gained but the
# lock lacks shows here). aisfx's own pins are the one known exception: it is installed --no-deps.
pip-check:
	@problems=$$($(BIN)/pip check 2>&1 | grep -v -e '^No broken requirements found' \
		-e '^aisfx [^ ]* requires ' -e '^aisfx [^ ]* has requirement '); \
	if [ -n "$$problems" ]; then echo "$$problems" >&2; echo "pip check: broken requirements (above)" >&2; exit 1; fi; \
	echo "pip check: OK (aisfx's own pins aside: it is installed --no-deps)"

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
	$(BIN)/python -m bench speed

clean:
	rm -rf $(VENV) .pytest_cache
