# Set-up and everyday targets. Everything runs from .venv, made on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: run test test-deps bench-deps check lint types faces bench soak clean venv

# Set-up says in one line what it does; pip's own words go to a log, shown
# whole if it fails.
INSTALL_LOG := $(VENV)/install.log

$(BIN)/python:
	@echo "making $(VENV) (a virtualenv for multiserver and its dependencies)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --upgrade pip > $(INSTALL_LOG) 2>&1 || { cat $(INSTALL_LOG); exit 1; }

# Editable, in setuptools' "compat" mode: a .pth line puts the checkout on
# sys.path. The default mode's import finder runs in every process of the
# venv: it made `python -c pass` 29 ms instead of 12.5 ms here, and every
# command the README's reader types paid it (issue 22).
EDITABLE := --config-settings editable_mode=compat

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing multiserver (editable) and its development tools into $(VENV) (log: $(INSTALL_LOG))"
	@$(BIN)/pip install -q -e '.[dev]' $(EDITABLE) >> $(INSTALL_LOG) 2>&1 || { cat $(INSTALL_LOG); exit 1; }
	@touch $(STAMP)

venv: $(STAMP)

# Opens a persistent shell session named "main" in this terminal
# (attach if it exists, else create it).
run: $(STAMP)
	@echo "multiserver is in $(abspath $(BIN)); to type it anywhere:"
	@echo '  export PATH="$(abspath $(BIN)):$$PATH"   # or: . $(BIN)/activate'
	$(BIN)/multiserver

# Programs some tests drive for real (a terminal emulator, a display for
# it, its clipboard): installed when missing, where this runs as root with
# apt (CI, a container); elsewhere the tests that need them skip, saying why.
TEST_PACKAGES := tmux dtach dvtm strace zsh fish kitty xterm xvfb xdotool xclip xauth libfontconfig1 fonts-dejavu-core openssh-server openssh-client

# $(call apt_install,PACKAGES,what they are for,what happens without them):
# the packages missing, installed with apt where this runs as root with it.
define apt_install
	@command -v dpkg-query >/dev/null || exit 0; \
	missing=$$(for p in $(1); do \
	  dpkg-query -W -f '$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	missing=$$(echo $$missing); \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing with apt $(2): $$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q $$missing >/dev/null 2>&1 \
	  || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q $$missing >/dev/null 2>&1; } \
	  || echo "could not install $$missing: $(3)"; \
	else echo "not installed: $$missing ($(3))"; fi
endef

test-deps:
	$(call apt_install,$(TEST_PACKAGES),what some tests drive for real,the tests that need them skip)

test: $(STAMP) test-deps
	$(BIN)/pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP)
	$(BIN)/mypy

check: lint types test

# What is generated from one definition: the stubs type checkers read for the
# lazy package faces (from their tables), and the light classes of the
# store's light read (from its attrs ones), by tools/, which is not
# installed. Tests fail when any is stale.
faces: $(STAMP)
	$(BIN)/python -c 'from multiserver._lazy import write_stubs; write_stubs(["multiserver", "multiserver.internal", "restore"])'
	$(BIN)/python -m tools.store_lightgen


BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): pyproject.toml | $(STAMP)
	@echo "installing what the benchmarks draw with (matplotlib) into $(VENV) (log: $(INSTALL_LOG))"
	@$(BIN)/pip install -q -e '.[dev,bench]' $(EDITABLE) >> $(INSTALL_LOG) 2>&1 || { cat $(INSTALL_LOG); exit 1; }
	@touch $(BENCH_STAMP)

# The peers the figures measure beside multiserver (abduco is not in
# Debian's archive: its rows say so).
BENCH_PACKAGES := tmux dtach screen

bench-deps:
	$(call apt_install,$(BENCH_PACKAGES),the peers the benchmarks measure,their rows say not installed)

bench: $(BENCH_STAMP) bench-deps
	$(BIN)/python -m benchmarks

soak: $(STAMP)
	$(BIN)/pytest -q -m slow --timeout 1800

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
