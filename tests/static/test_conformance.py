"""mypy proves that every engine, fake, simulated engine, remote engine and runtime proxy
implements its protocols (``conformance.py``), and that the check has teeth: an engine whose
``prefill`` takes no ``info``, or one of another kind, is rejected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

pytest.importorskip("mypy", reason="the test extra installs mypy (scripts/setup.sh test)")


def _source_tree(tmp: Path) -> Path:
    """``ayo`` as an installed wheel lays it out (``ayo/engines`` and the others inside it), of
    links to the checkout: mypy reads the source as it is, not through our import hook."""
    pkg = tmp / "src"
    (pkg / "ayo").mkdir(parents=True)
    for entry in (ROOT / "ayo").iterdir():
        (pkg / "ayo" / entry.name).symlink_to(entry)
    for folder in ("kernels", "engines", "scheduler"):
        (pkg / "ayo" / folder).symlink_to(ROOT / folder)
    (pkg / "benchmarks").symlink_to(ROOT / "benchmarks")
    return pkg


def _mypy(tmp: Path, target: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MYPYPATH": str(_source_tree(tmp))}
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
           "--cache-dir", str(tmp / "cache"), str(target)]  # fmt: skip
    return subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


def test_every_engine_implements_its_protocols(tmp_path: Path) -> None:
    result = _mypy(tmp_path, HERE / "conformance.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues found in 1 source file" in result.stdout


NEGATIVE = """
from ayo.scheduler.ir.engine_api import EmbedderProtocol, LLMProtocol
from ayo.scheduler.sim.fakes import FakeLLM


class NoInfo(FakeLLM):
    async def prefill(self, seq: int, tokens: list[int]) -> None:  # type: ignore[override]
        return None


def no_info(e: NoInfo) -> LLMProtocol:
    return e


def wrong_kind(e: FakeLLM) -> EmbedderProtocol:
    return e
"""


def test_the_check_rejects_an_engine_that_breaks_its_protocol(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(NEGATIVE)
    out = _mypy(tmp_path, bad).stdout
    assert 'got "NoInfo", expected "LLMProtocol"' in out, out
    assert "def prefill(self, seq: Any, tokens: list[int], *, info: Any)" in out
    assert 'got "FakeLLM", expected "EmbedderProtocol"' in out
