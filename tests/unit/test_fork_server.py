"""The fork server's import shortcuts: kafka's package __init__ deferred, bytecode kept in a cache."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from cluster.launch.fork_client import bytecode_cache, same_code_environment


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            env=same_code_environment(), timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_kafka_submodules_import_without_the_package_init_which_runs_on_first_use():
    output = run_python("""
        import sys
        from cluster.launch.fork_server import defer_kafka_package_init
        defer_kafka_package_init()
        from kafka import codec
        import kafka.protocol.producer
        print("kafka.admin" in sys.modules, "kafka.producer" in sys.modules, codec.__name__)
        import kafka
        print(kafka.KafkaProducer.__module__, "kafka.admin" in sys.modules)
        try:
            kafka.NoSuchName
        except AttributeError:
            print("AttributeError")
    """)
    assert output.split("\n")[:3] == ["False False kafka.codec", "kafka.producer.kafka True", "AttributeError"]


def test_bytecode_goes_to_a_cache_only_where_writing_it_beside_the_source_is_turned_off(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    assert bytecode_cache() == {}
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert bytecode_cache() == {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(tmp_path / "kraftwerk" / "pycache")}
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "theirs"))
    assert bytecode_cache() == {}
