# Two commands on a fresh Linux machine:  `make run`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
export PYTHON VENV

.PHONY: run test setup setup-test model bench screenshot clean install-desktop uninstall-desktop

# Re-run the set-up when the dependency list changes.
$(VENV)/.setup-app: pyproject.toml packaging/setup_venv.sh
	packaging/setup_venv.sh
	@touch $@

$(VENV)/.setup-test: pyproject.toml packaging/setup_venv.sh
	packaging/setup_venv.sh test
	@touch $@ $(VENV)/.setup-app

setup: $(VENV)/.setup-app model
setup-test: $(VENV)/.setup-test model

# Convert the embedded SmolLM2-135M once (idempotent: a manifest marks a finished folder).
model: $(VENV)/.setup-app
	$(PY) -m app.core.embedded_model

run: setup
	$(PY) -m app

test: setup-test
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)

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
