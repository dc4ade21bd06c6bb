# The two commands a new machine needs:
#   make run    build static/ (runtime, wheels, page, demo model) and serve it on 127.0.0.1:$(PORT)
#   make test   install what the tests need (Chromium from Debian included), build, run every test
PYTHON ?= python3
PORT ?= 8000

.PHONY: run build models test test-deps unit lint bench clean

models:
	$(PYTHON) build_scripts/fetch_models.py
	$(PYTHON) build_scripts/fetch_vocabs.py

build:
	PYTHON=$(PYTHON) bash build_scripts/install_build_deps.sh
	$(PYTHON) build_scripts/build_static.py

run: build
	$(PYTHON) build_scripts/serve.py --port $(PORT)

test-deps:
	PYTHON=$(PYTHON) bash build_scripts/install_test_deps.sh

test: test-deps models build lint
	$(PYTHON) -m pytest

# ruff for the Python; TypeScript (build_scripts/lint/package.json: make test-deps installs it) for the page's
# JavaScript, whose modules begin with // @ts-check: the page's with the page's globals, the workers' with a worker's.
TSC = build_scripts/lint/node_modules/.bin/tsc
lint:
	$(PYTHON) -m ruff check .
	@test -x $(TSC) || { echo "error: no $(TSC): make test-deps (or npm ci --prefix build_scripts/lint) installs TypeScript"; exit 1; }
	$(TSC) --noEmit --allowJs --checkJs -p tsconfig.json
	$(TSC) --noEmit --allowJs --checkJs -p tsconfig.workers.json

unit:
	$(PYTHON) -m pytest -m "not node and not browser"

bench: models build
	$(PYTHON) bench/make_models.py
	$(PYTHON) bench/run.py

clean:
	rm -rf static build dist *.egg-info
