# The README's two commands: `make quickstart` and `make test`. Both set up .venv first.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup quickstart test lint clean

setup: $(STAMP)

# Re-installs only when a requirements file changed: a second `make setup` is a no-op.
$(STAMP): requirements.txt requirements-sim-nodeps.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-sim-nodeps.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

quickstart: setup
	$(PY) -m rllib_caps.tune --config tune_configs/quickstart.yaml

test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 2 --dist worksteal --durations=25

lint: setup
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV)
