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
# and .venv-airflow-spark-prev) and fault-injection tiers (quick mode), on a stack the
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
# Airflow tier (tests/airflow) in each. .venv-airflow installs requirements/airflow.txt
# under the constraints the project keeps; .venv-airflow-spark-prev the same with the
# Spark provider's previous minor version (requirements/airflow-spark-previous.txt),
# its other packages pinned as in the first, so they come from pip's cache.
AIRFLOW_VENV ?= .venv-airflow
AIRFLOW_PREV_VENV ?= .venv-airflow-spark-prev
SPARK_PROVIDER := apache-airflow-providers-apache-spark

airflow-venv: $(AIRFLOW_VENV)/.installed $(AIRFLOW_PREV_VENV)/.installed

$(AIRFLOW_VENV)/.installed: requirements/airflow.txt requirements/airflow-constraints.txt
	python3 -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/pip install --quiet -r requirements/airflow.txt \
		-c requirements/airflow-constraints.txt
	touch $@

$(AIRFLOW_PREV_VENV)/.installed: requirements/airflow.txt requirements/airflow-constraints.txt \
		requirements/airflow-spark-previous.txt | $(AIRFLOW_VENV)/.installed
	rm -rf $(AIRFLOW_PREV_VENV)
	python3 -m venv $(AIRFLOW_PREV_VENV)
	$(AIRFLOW_PREV_VENV)/bin/pip install --quiet --upgrade pip
	grep -v '^$(SPARK_PROVIDER)==' requirements/airflow.txt > $(AIRFLOW_PREV_VENV)/requirements.txt
	grep -v '^$(SPARK_PROVIDER)==' requirements/airflow-constraints.txt \
		> $(AIRFLOW_PREV_VENV)/constraints.txt
	$(AIRFLOW_PREV_VENV)/bin/pip install --quiet -r $(AIRFLOW_PREV_VENV)/requirements.txt \
		-r requirements/airflow-spark-previous.txt -c $(AIRFLOW_PREV_VENV)/constraints.txt
	touch $@

# Re-resolve requirements/airflow.txt in a scratch venv and freeze the result.
airflow-constraints:
	rm -rf .venv-airflow-resolve
	python3 -m venv .venv-airflow-resolve
	.venv-airflow-resolve/bin/pip install --quiet --upgrade pip
	.venv-airflow-resolve/bin/pip install --quiet -r requirements/airflow.txt
	{ sed -n '1,3p' requirements/airflow-constraints.txt; \
	  .venv-airflow-resolve/bin/pip freeze --all --exclude-editable \
	    | grep -v '^pip==\|^setuptools==\|^wheel=='; } > requirements/airflow-constraints.txt.new
	mv requirements/airflow-constraints.txt.new requirements/airflow-constraints.txt
	rm -rf .venv-airflow-resolve
