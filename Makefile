# The two commands the README promises: `make run` (dashboard on the embedded default) and
# `make test` (the whole suite, as CI runs it). Both install what they need first.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# The suite runs against real services; CI and a fresh machine have them on these addresses.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/topoweb
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
PY_SOURCES := topoweb collector tests bench docs manage.py

.PHONY: install run test lint bench screenshots approve-screenshots clean

$(VENV)/.installed: requirements.txt requirements-dev.txt collector/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# The dashboard's browser libraries (cytoscape, uPlot) come from npm, pinned by the lockfile.
frontend/node_modules/.package-lock.json: frontend/package.json frontend/package-lock.json
	npm ci --prefix frontend --no-audit --no-fund
	touch $@

install: $(VENV)/.installed frontend/node_modules/.package-lock.json

# The browser tests drive Debian's Chromium (Playwright cannot download its own browser here).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@if [ "$$(id -u)" != 0 ]; then echo "Install Debian's chromium (sudo apt-get install chromium)" >&2; exit 1; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

# The settings default to production (DEBUG off, SECRET_KEY and ALLOWED_HOSTS required):
# `make run` asks for the development ones explicitly.
run: export DEBUG := 1
run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py load_demo
	$(PY) manage.py runserver $(HOST):$(PORT)

# The same checks `make test` runs first, without the test suite.
lint: install
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)
	$(VENV)/bin/mypy
	cd frontend && node_modules/.bin/eslint --max-warnings 0 src

# The visual check compares pictures drawn with Debian's DejaVu fonts (what the approved
# pictures in tests/e2e/approved/ were drawn with).
FONT := /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
$(FONT):
	@if [ "$$(id -u)" != 0 ]; then echo "Install Debian's fonts-dejavu-core (sudo apt-get install fonts-dejavu-core)" >&2; exit 1; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-dejavu-core >/dev/null

# The alert rules and the dashboard's queries are checked with Debian's promtool.
PROMTOOL := /usr/bin/promtool
$(PROMTOOL):
	@if [ "$$(id -u)" != 0 ]; then echo "Install Debian's prometheus for promtool (sudo apt-get install prometheus)" >&2; exit 1; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null

# The collector's systemd unit and timer are checked with systemd-analyze.
SYSTEMD_ANALYZE := /usr/bin/systemd-analyze
$(SYSTEMD_ANALYZE):
	@if [ "$$(id -u)" != 0 ]; then echo "Install Debian's systemd for systemd-analyze (sudo apt-get install systemd)" >&2; exit 1; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null

test: install $(CHROMIUM) $(FONT) $(PROMTOOL) $(SYSTEMD_ANALYZE)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)
	$(VENV)/bin/mypy
	cd frontend && node_modules/.bin/eslint --max-warnings 0 src
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} \
		$(VENV)/bin/pytest $(PYTEST_ARGS)

# bench/query.py drives both servers with Debian's wrk.
WRK := /usr/bin/wrk
$(WRK):
	@if [ "$$(id -u)" != 0 ]; then echo "bench/query.py needs wrk: install Debian's (sudo apt-get install wrk)" >&2; exit 1; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null

# bench/live.py and bench/bare_drf.py are modules the scripts use, not scripts.
bench: install $(WRK)
	for script in bench/*.py; do \
		case $$script in bench/live.py|bench/bare_drf.py) continue;; esac; \
		$(PY) $$script || exit 1; \
	done

screenshots: install
	$(PY) docs/screenshots.py

# Rewrites the visual check's approved pictures from the pages as they are now, and the docs'
# pictures cut from them. A deliberate step: look at every changed PNG (git status
# tests/e2e/approved/ docs/) before committing it.
approve-screenshots: install $(CHROMIUM) $(FONT)
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} \
		TOPOWEB_APPROVE_SCREENSHOTS=1 $(VENV)/bin/pytest -q tests/e2e/test_visual.py
	$(PY) docs/screenshots.py

clean:
	rm -rf $(VENV) frontend/node_modules staticfiles
