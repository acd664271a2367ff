# Two commands on a fresh Linux machine:  `make run`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STEP   := packaging/step.sh
export PYTHON VENV
# When this make began: `make test` reports its set-up's time from it.
MAKE_START := $(shell date +%s)

.PHONY: run test test-fast figures setup setup-test system-run system-test model bench screenshot clean install-desktop uninstall-desktop

# Re-run the set-up when the dependency list changes.
# Each set-up step prints one line; its own output (apt, pip) goes to build/setup.log (packaging/step.sh).
$(VENV)/.setup-app: pyproject.toml packaging/setup_venv.sh
	@$(STEP) "Python packages: PyTorch and vLLM (GBs on a first run)" packaging/setup_venv.sh
	@touch $@

$(VENV)/.setup-test: pyproject.toml packaging/setup_venv.sh
	@$(STEP) "Python packages: PyTorch, vLLM and the test tools (GBs on a first run)" packaging/setup_venv.sh test
	@touch $@ $(VENV)/.setup-app

setup: $(VENV)/.setup-app model
setup-test: system-test $(VENV)/.setup-test model $(VENV)/.tests-compiled

# The tests' rewritten asserts, cached once for every pytest process that follows (packaging/compile_tests.sh);
# again only when a test file changes.
$(VENV)/.tests-compiled: $(VENV)/.setup-test $(shell find tests -name '*.py')
	@$(STEP) "the tests' asserts, rewritten once for every test process" packaging/compile_tests.sh
	@touch $@

# The Debian/Ubuntu packages: Qt's platform libraries for `make run`, those plus the tests' desktop tools
# (Xvfb, openbox, wmctrl, xdotool, rsync, ...) for `make test`. Installed as root or with `sudo -n`; otherwise
# the script stops and names the command to run. The list is in the script.
system-run:
	@$(STEP) "system packages (Qt's platform libraries)" packaging/linux/system_packages.sh run
system-test:
	@$(STEP) "system packages (Qt's libraries, Xvfb and the desktop tools)" packaging/linux/system_packages.sh test

# Convert the embedded SmolLM2-135M once (idempotent: a manifest marks a finished folder).
model: $(VENV)/.setup-app
	@$(STEP) "the embedded model (SmolLM2-135M, converted once)" $(PY) -m app.core.models.embedded_model

run: system-run setup
	$(PY) -m app

# The fast tests on TEST_WORKERS processes (pytest-xdist), then the real-engine tests on REAL_WORKERS, a test
# file per worker (a file's engines and desktops are shared by its tests; files that use a session engine go
# together, tests/conftest.py's engine_groups); each worker's engines get their own core, or none pinned when workers
# outnumber cores (tests/conftest.py). Both runs always happen; the target fails if either failed ("no tests
# collected" is fine: PYTEST_ARGS may pick files of one kind only). The real-engine part runs one worker more than
# the 2 cores: with 2, a quarter of the CPU idled while engines imported, spawned and shut down; with 3, vmstat
# shows none idle until the last minute (2026-12-05). The fast part steals work (xdist's worksteal: a worker that
# runs dry takes queued tests from the other): 173 s against 181 s with xdist's fixed split (one after the other).
TEST_WORKERS ?= 2
REAL_WORKERS ?= 3
# The second part runs the real engine and the real models outside it (transformers: the KV check's model, the
# embedding model); the fast part runs everything else, doubles, real tokenizers, servers and files included.
REAL_TESTS := real_engine or real_model
PYTEST := QT_QPA_PLATFORM=offscreen $(PY) -m pytest

# `make test` also writes its counts and times to $(RESULTS)/suite.json (packaging/figures.py reads pytest's
# junit files); `make figures` copies that into docs/results/ and regenerates the figures the docs quote.
RESULTS ?= build/results
test: setup-test
	@mkdir -p $(RESULTS); fast=0; slow=0; setup_s=$$(( $$(date +%s) - $(MAKE_START) )); \
	echo "nalar: set-up done in $${setup_s} s; the fast tests ($(TEST_WORKERS) workers)…"; \
	$(PYTEST) -m "not ($(REAL_TESTS))" -n $(TEST_WORKERS) --dist worksteal --junit-xml=$(RESULTS)/fast.xml $(PYTEST_ARGS) \
	  || fast=$$?; \
	echo "nalar: the real-engine tests ($(REAL_WORKERS) workers, a file per worker)…"; \
	$(PYTEST) -m "$(REAL_TESTS)" -n $(REAL_WORKERS) --dist loadgroup --junit-xml=$(RESULTS)/real.xml $(PYTEST_ARGS) \
	  || slow=$$?; \
	$(PY) packaging/figures.py --suite-from-junit $(RESULTS)/fast.xml $(RESULTS)/real.xml --setup-s $$setup_s \
	  --total-s $$(( $$(date +%s) - $(MAKE_START) )) --fast-workers $(TEST_WORKERS) --real-workers $(REAL_WORKERS) \
	  --out $(RESULTS)/suite.json || echo "nalar: the suite's results file was not written (above)"; \
	for rc in $$fast $$slow; do [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || exit $$rc; done

# After a whole `make test`: its results become the figures the README and docs quote (checked by a fast test).
figures:
	cp $(RESULTS)/suite.json docs/results/suite.json
	$(PY) packaging/figures.py

# The fast tests alone (a few minutes).
test-fast: setup-test
	$(PYTEST) -m "not ($(REAL_TESTS))" -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

bench: setup
	$(PY) -m app bench engine

# The application-menu launcher (and icon) for this user, starting Nalar from this checkout's venv.
install-desktop: setup
	packaging/linux/install_desktop.sh

uninstall-desktop:
	packaging/linux/uninstall_desktop.sh

screenshot: setup
	packaging/linux/screenshot.sh docs/screenshot.png

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
