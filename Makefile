# The two commands of the README. Each sets up what it needs on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint bench faults faults-report airflow-venv airflow-constraints \
	prometheus-tools

setup: $(VENV)/.installed

# Last step: the Spark packages, once, into the user's cache and the venv's
# spark-defaults.conf (`outbox-relay jars --install`).
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[spark,local,test]'
	$(VENV)/bin/outbox-relay jars --install
	touch $@

# Local stack (embedded PostgreSQL + a Kafka broker), schema, demo outbox, drain, summary.
demo: setup
	$(VENV)/bin/outbox-relay --config conf/local.toml demo

lint: setup
	$(VENV)/bin/ruff check outbox_relay jobs tests dags notebooks
	$(VENV)/bin/mypy outbox_relay

# The whole suite: lint, then the unit, Spark, integration, Airflow (in .venv-airflow
# and .venv-airflow-oldest) and fault-injection tiers (quick mode), on a stack the
# session starts itself. The fault tier's figures go to the git-ignored
# .relay-data/reports/ (`make faults-report` updates the tracked reports/).
test: lint airflow-venv prometheus-tools
	$(PY) -m pytest

# promtool (the alert rules' tests) and the Pushgateway (the push test), from Debian's
# packages, unpacked under .relay-data/prometheus without installing anything system-wide.
# The package index is refreshed only when the download fails without it.
PROM_DIR := .relay-data/prometheus
PROM_DEBS := prometheus prometheus-pushgateway

prometheus-tools: $(PROM_DIR)/.fetched

$(PROM_DIR)/.fetched:
	rm -rf $(PROM_DIR) && mkdir -p $(PROM_DIR)/debs
	cd $(PROM_DIR)/debs && { apt-get download $(PROM_DEBS) \
		|| { apt-get update && apt-get download $(PROM_DEBS); }; }
	for deb in $(PROM_DIR)/debs/*.deb; do dpkg-deb -x "$$deb" $(PROM_DIR); done
	$(PROM_DIR)/usr/bin/promtool --version >/dev/null
	$(PROM_DIR)/usr/bin/prometheus-pushgateway --version >/dev/null 2>&1
	touch $@

# The fault-injection suite alone (quick mode; FAULTS_ARGS=--long for the soak).
faults: setup
	$(PY) -m pytest tests/faults -m faults $(FAULTS_ARGS)

# The fault and cluster tiers afresh, then their figures into the tracked
# reports/faults.{json,md}: the only target that changes them.
faults-report: setup
	$(PY) -m tests.faults.report clear
	$(PY) -m pytest tests/faults tests/cluster -m "faults or cluster" $(FAULTS_ARGS)
	$(PY) -m tests.faults.report publish

# The benchmark on the shipped profile (conf/local.toml), against the peer, in about 20
# minutes on the stack `make demo` uses: W1 on two states of the table, the latency, CPU
# and memory at 1,000 and 500 msg/s on a new topic, idle CPU, launch to the first record,
# a scheduled drain and W3 (reports/bench-default.{json,md}, docs/performance.md).
# BENCH_ARGS="--only W1,LAT" runs some parts; BENCH_ARGS=--quick checks the bench itself.
bench: setup
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench run $(BENCH_ARGS)

# Airflow's own venvs (docs/airflow.md): tests/integration/test_airflow_dags.py runs the
# Airflow tier (tests/airflow) in each. .venv-airflow: the newest Airflow and providers,
# requirements/airflow.txt under requirements/airflow-constraints.txt. .venv-airflow-oldest:
# the oldest Airflow 3 the providers accept, with the Spark provider's previous minor;
# requirements/airflow-oldest.txt replaces those lines of airflow.txt, and
# airflow-oldest-constraints.txt holds only what differs from airflow-constraints.txt,
# so every other package has the first venv's version and comes from pip's cache.
AIRFLOW_VENV ?= .venv-airflow
AIRFLOW_OLDEST_VENV ?= .venv-airflow-oldest
AIRFLOW_RESOLVE := .venv-airflow-resolve
# $(call without,OVER,BASE): the lines of BASE (a requirements or constraints file) whose
# package the file OVER does not name; $(call overlay,OVER,BASE): those, then OVER's.
without = awk 'FNR == 1 { file++ } /^[[:space:]]*(\#|$$)/ { next } \
	{ name = tolower($$0); sub(/[=<>!~ ;[].*/, "", name) } \
	file == 1 { over[name] = 1; next } !(name in over)' $(1) $(2)
overlay = { $(call without,$(1),$(2)); grep -v '^[[:space:]]*\(\#\|$$\)' $(1); }
# $(call fresh_venv,DIR): a new venv with a current pip, and the oldest set's requirements
# (airflow.txt with airflow-oldest.txt's lines) in DIR/requirements.txt.
fresh_venv = rm -rf $(1) && python3 -m venv $(1) && $(1)/bin/pip install --quiet --upgrade pip \
	&& $(call overlay,requirements/airflow-oldest.txt,requirements/airflow.txt) \
	> $(1)/requirements.txt
# The packages of the resolve venv, as constraints.
freeze = $(AIRFLOW_RESOLVE)/bin/pip freeze --all --exclude-editable \
	| grep -v '^pip==\|^setuptools==\|^wheel=='

airflow-venv: $(AIRFLOW_VENV)/.installed $(AIRFLOW_OLDEST_VENV)/.installed

$(AIRFLOW_VENV)/.installed: requirements/airflow.txt requirements/airflow-constraints.txt
	python3 -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/pip install --quiet -r requirements/airflow.txt \
		-c requirements/airflow-constraints.txt
	touch $@

$(AIRFLOW_OLDEST_VENV)/.installed: requirements/airflow.txt requirements/airflow-constraints.txt \
		requirements/airflow-oldest.txt requirements/airflow-oldest-constraints.txt \
		| $(AIRFLOW_VENV)/.installed
	$(call fresh_venv,$(AIRFLOW_OLDEST_VENV))
	$(call overlay,requirements/airflow-oldest-constraints.txt,requirements/airflow-constraints.txt) \
		> $(AIRFLOW_OLDEST_VENV)/constraints.txt
	$(AIRFLOW_OLDEST_VENV)/bin/pip install --quiet -r $(AIRFLOW_OLDEST_VENV)/requirements.txt \
		-c $(AIRFLOW_OLDEST_VENV)/constraints.txt
	touch $@

# Re-resolve both constraints files in a scratch venv: requirements/airflow.txt freely,
# frozen whole; then the oldest set under those versions but for the packages
# airflow-oldest-constraints.txt names (a new conflict: add its package there), frozen as
# the lines that differ. Each file keeps its first three lines, its header.
airflow-constraints:
	$(call fresh_venv,$(AIRFLOW_RESOLVE))
	$(AIRFLOW_RESOLVE)/bin/pip install --quiet -r requirements/airflow.txt
	{ sed -n '1,3p' requirements/airflow-constraints.txt; $(freeze); } \
		> requirements/airflow-constraints.txt.new
	mv requirements/airflow-constraints.txt.new requirements/airflow-constraints.txt
	$(call fresh_venv,$(AIRFLOW_RESOLVE))
	$(call without,requirements/airflow-oldest-constraints.txt,requirements/airflow-constraints.txt) \
		> $(AIRFLOW_RESOLVE)/constraints.txt
	$(AIRFLOW_RESOLVE)/bin/pip install --quiet -r $(AIRFLOW_RESOLVE)/requirements.txt \
		-c $(AIRFLOW_RESOLVE)/constraints.txt
	{ sed -n '1,3p' requirements/airflow-oldest-constraints.txt; \
	  $(freeze) | awk 'FNR == 1 { file++ } file == 1 { base[tolower($$0)] = 1; next } \
	    !(tolower($$0) in base)' requirements/airflow-constraints.txt -; } \
		> requirements/airflow-oldest-constraints.txt.new
	mv requirements/airflow-oldest-constraints.txt.new requirements/airflow-oldest-constraints.txt
	rm -rf $(AIRFLOW_RESOLVE)
