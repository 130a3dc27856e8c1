# Two commands on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: serve test install bench clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first and pinned: 2.13.0 is the CPU wheel; letting a dependency pick torch pulls CUDA builds.
$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# RECALL_DEMO=1: the first start seeds demo collections so the page at / works at once
serve: install
	RECALL_DEMO=$${RECALL_DEMO:-1} $(BIN)/recall serve

test: install
	$(BIN)/python -m pytest -q -ra

bench: install
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache
