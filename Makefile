# The one gate: `make check` installs the dev extras into the active Python and runs
# lint, format check, type check and the whole test suite.
PYTHON ?= python3

# Python writes .pyc files here even where the environment says not to: the suite starts the
# CLI and the MCP server as child processes, each of which would otherwise compile the package
# again, and pytest would rewrite the asserts of every test module in every worker.
unexport PYTHONDONTWRITEBYTECODE

# `install` runs pip once per environment and again only when pyproject.toml changes (the stamp
# lives in the environment, so a fresh venv installs); `make -B install` forces it.
STAMP := $(shell $(PYTHON) -c "import sys; print(sys.prefix)")/.agent-payload-dev-installed

.PHONY: install check quick thorough lint test wheel-smoke bench typecheck-examples size

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m pip install -q -e ".[dev]"
	@touch "$@"

RUFF := $(PYTHON) -m ruff
MYPY := $(PYTHON) -m mypy
LINT_IMPORTS := $(PYTHON) -c "from importlinter.cli import lint_imports_command; lint_imports_command()" --no-cache
# -n auto: one pytest-xdist worker per CPU (each with its own fake provider server);
# --dist worksteal: a worker that runs out of tests takes some from the other's queue, so a few
# long tests at the end do not leave a CPU idle.
PYTEST := $(PYTHON) -m pytest -q -n auto --dist worksteal

lint:
	$(RUFF) check agent_payload tests bench
	$(RUFF) format --check agent_payload tests bench
	$(MYPY)
	$(LINT_IMPORTS)

test:
	$(PYTEST)

# The inner loop while editing: every test but the `slow` ones (hypothesis properties, load
# tests, child processes, agent frameworks; see tests/conftest.py). Not a gate: `make check`
# runs them all.
quick:
	$(PYTEST) -m "not slow"

# Every hypothesis property with 1,000 examples (those that ask for half of the profile's count
# with 500) instead of `make check`'s 25: a deeper search, ~8 minutes on two cores. Not a gate.
thorough:
	$(PYTEST) -m hypothesis --hypothesis-profile=thorough

# `check` runs mypy beside the tests: a cold mypy (a fresh clone, CI) is ~15 s of one CPU, which
# the tests' workers share; its report follows the tests' and fails the check the same way.
check: install
	$(RUFF) check agent_payload tests bench
	$(RUFF) format --check agent_payload tests bench
	$(LINT_IMPORTS)
	@log=$$(mktemp); $(MYPY) > "$$log" 2>&1 & mypy=$$!; \
	echo '$(PYTEST)  (and $(MYPY) beside it)'; status=0; $(PYTEST) || status=$$?; \
	wait $$mypy || status=$$?; echo '$(MYPY):'; cat "$$log"; rm -f "$$log"; exit $$status

wheel-smoke:
	bash .ci/wheel-smoke

# The package's size (issue 32's measure: lines, docstring share, modules over 650 lines).
size:
	$(PYTHON) .ci/size.py

bench:
	$(PYTHON) bench/merge.py
	$(PYTHON) bench/parse.py
	$(PYTHON) bench/tokens.py
	$(PYTHON) bench/schema.py
	$(PYTHON) bench/context.py
	$(PYTHON) bench/outline_reads.py
	$(PYTHON) bench/store.py
	$(PYTHON) bench/render.py
	$(PYTHON) bench/run.py
	$(PYTHON) bench/loop_stall.py

# mypy --strict on the README's examples and on a typed OpenAI tool loop (also part of `test`).
typecheck-examples:
	$(PYTHON) -m pytest -q tests/test_readme_examples.py -k mypy
