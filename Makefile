# tfcourse — `make lab` opens the course, `make test` runs every test.
# Both create (or reuse) the virtual environment in $(VENV) and install the project into it.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tfcourse-installed
LAB_SWITCH := jupyter-config/jupyter_server_config.d/tfcourse.json
LAB_SETTINGS := jupyter-config/lab-settings/overrides.json
LAZY_IRI := jupyter-config/site-packages/tfcourse_lazy_iri.py jupyter-config/site-packages/tfcourse_lazy_iri.pth
# The environment's programs first: nbgrader runs `alembic` and `jupyter` by name.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: help lab test test-fast grade bench solutions solutions-fast student-version clean-venv

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml $(LAB_SWITCH) $(LAB_SETTINGS) $(LAZY_IRI)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
		|| { echo "tfcourse needs Python >= 3.10; set PYTHON=python3.x"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[course,test,pretrained]"
	@# An editable install skips data files: put the server extension's switch (lessons open
	@# unmodified in JupyterLab) into the environment's Jupyter configuration ourselves, and
	@# JupyterLab's defaults for the course (no "Jupyter news?" question, no update check).
	install -D -m 644 $(LAB_SWITCH) $(VENV)/etc/jupyter/jupyter_server_config.d/tfcourse.json
	install -D -m 644 $(LAB_SETTINGS) $(VENV)/share/jupyter/lab/settings/overrides.json
	@# Every Jupyter server and nbgrader command imports jsonschema, which imports rfc3987_syntax,
	@# which spends ~1.3 s building parsers that no Jupyter schema uses: load it on first use instead.
	install -m 644 $(LAZY_IRI) $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	@touch $(STAMP)

# Jupyter refuses to run as root unless told; containers often run as root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

# The server's root is the course folder (nbgrader's formgrader and Assignment List need the course
# inside it); the browser opens on notebooks/.
lab: $(STAMP)  ## set up, then open the course in JupyterLab
	$(BIN)/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks

# The tests spread over pytest-xdist workers, one more than the CPUs this process may use (at most
# 4); a lesson's notebook cells stay on one worker. TEST_JOBS=0 runs everything in this process.
# One more, because much of the suite waits: a grading kernel starting, a JupyterHub spawning, a
# browser loading; on 2 CPUs, 3 workers took 712 s where 2 took 842 s (warm, the same machine), and after
# grading learned to skip the demonstrations 4 workers took 727 s where 3 took 585 s.
# (Not xdist's `auto`: it counts physical cores, and a machine whose two CPUs are one core's two
# hardware threads would get a single worker and take twice as long.)
TEST_JOBS ?= $(shell $(PYTHON) -c "import os; n = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count(); print(min(4, (n or 1) + 1))")
XDIST := -n $(TEST_JOBS) --maxprocesses=4 --dist loadfile

test: $(STAMP)  ## set up, then run the whole test suite (solution notebooks under nbval included)
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

test-fast: $(STAMP)  ## the package and the checks only: no notebooks, no nbgrader (50 s on an idle 2-CPU machine)
	$(BIN)/python -m pytest tests -m "not slow" $(XDIST) $(PYTEST_ARGS)

grade: $(STAMP)  ## grade the lessons you have started, hidden tests included (tfcourse grade; --all: every lesson)
	$(BIN)/tfcourse grade

# The figures go to the file the README's table quotes (tests/test_readme_figures.py compares them);
# `make bench BENCH_ARGS="--only kv"` passes options through, BENCH_OUTPUT= prints only.
BENCH_OUTPUT ?= benchmarks/latest.json
bench: $(STAMP)  ## print the package's performance figures and write them to benchmarks/latest.json
	$(BIN)/python -m tfcourse.course.bench $(if $(BENCH_OUTPUT),--output $(BENCH_OUTPUT)) $(BENCH_ARGS)

solutions: $(STAMP)  ## run every solution notebook end to end (full mode) into runs/solutions/
	$(BIN)/tfcourse run-solutions

solutions-fast: $(STAMP)  ## the same in fast mode (training cells shrink to seconds)
	$(BIN)/tfcourse run-solutions --fast

student-version: $(STAMP)  ## regenerate notebooks/ from solutions/ (never overwrites your edits)
	$(BIN)/python tools/release.py

clean-venv:  ## delete the virtual environment
	rm -rf $(VENV)
