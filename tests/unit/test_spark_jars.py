"""spark-defaults.conf gets the relay's jars in a block of its own, and nothing else of
the file changes; a spark.jars line of the user's own is never overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox_relay.launch import spark_jars
from outbox_relay.launch.ivy import ResolveError
from outbox_relay.launch.launcher import resubmit_argv
from outbox_relay.launch.packages import SPARK_PACKAGES

JARS = [Path("/cache/a/kafka-clients-3.9.2.jar"), Path("/cache/b/postgresql-42.7.8.jar")]


@pytest.fixture(autouse=True)
def cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_jars, "cached_jars", lambda: JARS)


def test_a_missing_file_gets_the_block(tmp_path: Path) -> None:
    path = spark_jars.install_spark_defaults(tmp_path)
    lines = path.read_text().splitlines()
    assert lines == [spark_jars.BEGIN, f"spark.jars {JARS[0]},{JARS[1]}",
                     "spark.driver.extraJavaOptions -XX:TieredStopAtLevel=1", spark_jars.END]


@pytest.mark.parametrize("line", ["spark.driver.extraJavaOptions -Xss4m",
                                  " spark.driver.extraJavaOptions=-Xss4m"])
def test_driver_options_of_the_users_own_are_kept_and_not_set_again(
        tmp_path: Path, line: str) -> None:
    path = tmp_path / "spark-defaults.conf"
    path.write_text(line + "\n")
    for _ in range(2):  # a second install sees the user's line outside its own block
        text = spark_jars.install_spark_defaults(tmp_path).read_text()
        assert text.startswith(line + "\n") and text.count("extraJavaOptions") == 1


def test_the_users_lines_stay_and_a_second_install_replaces_the_block(tmp_path: Path) -> None:
    path = tmp_path / "spark-defaults.conf"
    path.write_text("spark.executor.memory 2g\n# a comment\n")
    spark_jars.install_spark_defaults(tmp_path)
    path.write_text(path.read_text() + "spark.eventLog.enabled true\n")
    spark_jars.install_spark_defaults(tmp_path)
    text = path.read_text()
    assert text.count(spark_jars.BEGIN) == 1 and text.count("spark.jars ") == 1
    assert text.startswith("spark.executor.memory 2g\n# a comment\n")
    assert text.endswith("spark.eventLog.enabled true\n")


@pytest.mark.parametrize("line", ["spark.jars /opt/x.jar", "  spark.jars=/opt/x.jar"])
def test_a_spark_jars_line_of_the_users_own_is_refused(tmp_path: Path, line: str) -> None:
    (tmp_path / "spark-defaults.conf").write_text(line + "\n")
    with pytest.raises(ResolveError, match=r"sets spark\.jars already"):
        spark_jars.install_spark_defaults(tmp_path)
    assert (tmp_path / "spark-defaults.conf").read_text() == line + "\n"


def test_spark_jars_packages_is_not_spark_jars(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text("spark.jars.packages g:a:1\n")
    text = spark_jars.install_spark_defaults(tmp_path).read_text()
    assert text.startswith("spark.jars.packages g:a:1\n\n" + spark_jars.BEGIN)


def test_a_configuration_has_the_jars_by_file_name_or_as_packages() -> None:
    assert spark_jars.has_relay_jars("file:/elsewhere/kafka-clients-3.9.2.jar,"
                                     "/x/postgresql-42.7.8.jar,/x/extra.jar", None)
    assert not spark_jars.has_relay_jars("/x/postgresql-42.7.8.jar", None)
    assert spark_jars.has_relay_jars(None, ",".join(SPARK_PACKAGES))
    assert not spark_jars.has_relay_jars(None, None)


def test_the_second_submit_keeps_the_configuration_and_adds_the_jars(tmp_path: Path) -> None:
    conf = [("spark.master", "spark://127.0.0.1:7077"), ("spark.jars", "/x/extra.jar"),
            ("spark.app.submitTime", "1"), ("spark.driver.extraJavaOptions", "-Da=b:c#d\\e")]
    props = tmp_path / "spark.properties"
    argv = resubmit_argv(conf, ["/c/k.jar"], props)
    assert argv[1:3] == ["--properties-file", str(props)]
    assert props.stat().st_mode & 0o777 == 0o600
    assert props.read_text().splitlines() == [
        r"spark.master=spark\://127.0.0.1\:7077",
        "spark.jars=/x/extra.jar,/c/k.jar",
        r"spark.driver.extraJavaOptions=-Da\=b\:c\#d\\e",
    ]
