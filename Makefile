# Two commands on a fresh Linux machine:  `make run`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
export PYTHON VENV

.PHONY: run test test-fast setup setup-test system-run system-test model bench screenshot clean install-desktop uninstall-desktop

# Re-run the set-up when the dependency list changes.
$(VENV)/.setup-app: pyproject.toml packaging/setup_venv.sh
	packaging/setup_venv.sh
	@touch $@

$(VENV)/.setup-test: pyproject.toml packaging/setup_venv.sh
	packaging/setup_venv.sh test
	@touch $@ $(VENV)/.setup-app

setup: $(VENV)/.setup-app model
setup-test: system-test $(VENV)/.setup-test model

# The Debian/Ubuntu packages: Qt's platform libraries for `make run`, those plus the tests' desktop tools
# (Xvfb, openbox, wmctrl, xdotool, rsync, ...) for `make test`. Installed as root or with `sudo -n`; otherwise
# the script stops and names the command to run. The list is in the script.
system-run:
	packaging/linux/system_packages.sh run
system-test:
	packaging/linux/system_packages.sh test

# Convert the embedded SmolLM2-135M once (idempotent: a manifest marks a finished folder).
model: $(VENV)/.setup-app
	$(PY) -m app.core.models.embedded_model

run: system-run setup
	$(PY) -m app

# The fast tests on TEST_WORKERS processes (pytest-xdist), then the real-engine tests on REAL_WORKERS, a test
# file per worker (a file's engines and desktops are shared by its tests); each worker's engines get their own
# cores (tests/conftest.py). Both runs always happen; the target fails if either failed ("no tests collected"
# is fine: PYTEST_ARGS may pick files of one kind only).
TEST_WORKERS ?= 2
REAL_WORKERS ?= 2
PYTEST := QT_QPA_PLATFORM=offscreen $(PY) -m pytest

test: setup-test
	@fast=0; slow=0; \
	$(PYTEST) -m "not real_engine" -n $(TEST_WORKERS) $(PYTEST_ARGS) || fast=$$?; \
	$(PYTEST) -m real_engine -n $(REAL_WORKERS) --dist loadfile $(PYTEST_ARGS) || slow=$$?; \
	for rc in $$fast $$slow; do [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || exit $$rc; done

# The fast tests alone (a few minutes).
test-fast: setup-test
	$(PYTEST) -m "not real_engine" -n $(TEST_WORKERS) $(PYTEST_ARGS)

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
