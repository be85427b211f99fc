# Two entry points on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install bench fuzz clean

$(STAMP): pyproject.toml Makefile
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	# torch pinned to the CPU build on this machine's disk; pyproject keeps the open range for users
	$(VPY) -m pip install --quiet "torch==2.13.0" numpy setuptools wheel "pytest>=7" "hypothesis>=6"
	$(VPY) -m pip install --quiet --no-build-isolation --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VPY) examples/demo.py

test: $(STAMP)
	$(VPY) -m pytest -q -p no:cacheprovider tests

bench: $(STAMP)
	$(VPY) -m pip install --quiet matplotlib
	$(VPY) benchmarks/run.py

# a long differential fuzzing run: FUZZ_N programs, original against autovec
FUZZ_N ?= 10000
fuzz: $(STAMP)
	$(VPY) -m fuzz.runner --n $(FUZZ_N)

clean:
	rm -rf $(VENV) build *.egg-info
