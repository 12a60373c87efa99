# EverXCloud: `make run` serves the site on the embedded default, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha256sum requirements.txt | cut -c1-12)
HOST ?= 127.0.0.1
PORT ?= 8000
LANGS := -l pt -l fr
MAKEMESSAGES := $(PY) manage.py makemessages $(LANGS) --no-location --no-obsolete \
	--ignore=.venv --ignore=.locale_vendor --ignore=tests --ignore=bench --ignore=staticfiles \
	--ignore=scripts --ignore=templates/admin/auth

.PHONY: install run dev demo-data test test-cli test-agent sshd acl podman lint checks messages messages-check compile services chromium java html-checker wrk lock bench

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

compile: install
	$(PY) manage.py compilemessages --ignore=.venv --ignore=.locale_vendor -v0
	$(PY) scripts/vendor_locales.py

run: demo-data
	$(PY) scripts/serve.py --host $(HOST) --port $(PORT)

# Django's auto-reloading server instead of gunicorn, for working on the code.
dev: demo-data
	$(PY) scripts/serve.py --host $(HOST) --port $(PORT) --reload

# The demo_* and load_demo_* commands come from the demo app, which only the embedded settings install.
demo-data: compile
	$(PY) manage.py migrate --noinput -v0
	$(PY) manage.py load_gpu_catalog
	$(PY) manage.py load_demo_orderbook
	$(PY) manage.py load_fx_rates demo/data/demo_fx_rates.json
	$(PY) manage.py market open
	$(PY) manage.py load_demo_buyer
	$(PY) manage.py load_demo_operators

services: install
	$(PY) scripts/check_services.py

chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "Installing Debian's chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# OpenSSH's server, for the host agent's end-to-end test (tests/agent/test_end_to_end.py starts its
# own sshd on a loopback port; the machine's sshd service is neither started nor changed).
sshd:
	@test -x /usr/sbin/sshd || { \
		echo "Installing Debian's openssh-server for the agent's end-to-end test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >/dev/null; }

# Debian's getfacl, which the device test reads the GPU nodes' ACLs back with (the agent itself writes
# them with setxattr and needs no tool).
acl:
	@command -v getfacl >/dev/null 2>&1 || { \
		echo "Installing Debian's acl for the agent's device test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends acl >/dev/null; }

# Podman and what its real test needs (tests/agent/test_containers.py builds a Debian image with
# debootstrap from the machine's own mirror, cached in the git-ignored .tools/container-image/; its
# containers use a storage root, configuration and loopback ports of the test's, never the machine's).
PODMAN_PACKAGES := podman runc slirp4netns uidmap debootstrap

podman:
	@for program in podman runc slirp4netns newuidmap debootstrap; do \
		command -v $$program >/dev/null 2>&1 || test -x /usr/sbin/$$program || missing=1; done; \
	test -z "$$missing" || { \
		echo "Installing Debian's $(PODMAN_PACKAGES) for the agent's container test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(PODMAN_PACKAGES) >/dev/null; }

# The Nu HTML Checker: vnu-jar at the version scripts/vnu/package-lock.json pins (with its checksum),
# installed into the git-ignored .tools/. Its install script would download a Java of its own: skipped,
# Debian's is used instead.
VNU_JAR := .tools/node_modules/vnu-jar/build/dist/vnu.jar
HTML_CAPTURE_DIR := .tools/pages

java:
	@command -v java >/dev/null 2>&1 || { \
		echo "Installing Debian's Java for the HTML checker"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null; }

$(VNU_JAR): scripts/vnu/package.json scripts/vnu/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
		echo "Installing Debian's npm for the HTML checker"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	mkdir -p .tools
	cp scripts/vnu/package.json scripts/vnu/package-lock.json .tools/
	cd .tools && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

html-checker: java $(VNU_JAR)

wrk:
	@command -v wrk >/dev/null 2>&1 || { \
		echo "Installing Debian's wrk for the page benchmark"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

checks: install
	$(PY) manage.py makemigrations --check --dry-run -v0
	$(PY) manage.py check --fail-level WARNING
	# Production's required variables, with fake local values: `check --deploy` connects to neither.
	SECRET_KEY=check-deploy-only-$$(date +%s)-0123456789abcdefghijklmnopqrstuvwxyz \
		ALLOWED_HOSTS=everxcloud.example SITE_URL=https://everxcloud.example DJANGO_SETTINGS_MODULE=marketplace.settings.production \
		DATABASE_URL=postgres://check-deploy@127.0.0.1:5432/check-deploy-only REDIS_URL=redis://127.0.0.1:6379/0 \
		$(PY) manage.py check --deploy --fail-level WARNING

messages: install
	$(MAKEMESSAGES)
	$(PY) manage.py compilemessages --ignore=.venv --ignore=.locale_vendor -v0

messages-check: install
	$(PY) scripts/check_messages.py $(MAKEMESSAGES)

# pytest saves every page it renders (tests/html_capture.py), then the checker reads them all at once.
test: install services chromium sshd acl podman html-checker lint checks messages-check compile
	rm -rf $(HTML_CAPTURE_DIR)
	HTML_CAPTURE_DIR=$(HTML_CAPTURE_DIR) $(PY) -m pytest
	$(PY) scripts/check_html.py $(HTML_CAPTURE_DIR) --jar $(VNU_JAR)
	$(MAKE) --no-print-directory bench BENCH_SMOKE=1

# The command line (cli/) alone: its unit tests and the live one. `make test` runs them too.
test-cli: install services compile
	$(PY) -m pytest tests/cli

# The host agent (agent/) alone: its unit tests, and the real system's as root. `make test` runs them too.
test-agent: install services acl
	$(PY) -m pytest tests/agent

# The benchmarks against their physical limits (BENCHMARKS.md); BENCH_SMOKE=1: tiny sizes, seconds.
bench: compile services wrk
	$(PY) -m bench.run $(if $(BENCH_SMOKE),--smoke)

lock:
	uv pip compile pyproject.toml --extra dev --generate-hashes --python-version 3.11 \
		--custom-compile-command "make lock" -o requirements.txt
