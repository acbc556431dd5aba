"""The README's Quickstart as CI proves it: ``python -m ayo.server`` started from the repo root
and from an unrelated directory answers an app query and a chat completion, imports Hugging
Face's ``kernels`` (never our ``kernels/`` folder) and exits cleanly on SIGTERM."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import aiohttp
import pytest

from .helpers import ServerProcess

REPO = Path(__file__).resolve().parents[2]
SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"]).resolve()


def _hf_kernels_dir(log: str) -> Path:
    found = re.search(r"imports: .* kernels from (\S+)", log)
    assert found, log
    return Path(found.group(1)).resolve()


def test_kernels_is_hugging_face_in_this_process() -> None:
    import transformers.integrations.hub_kernels  # noqa: F401  fails if kernels is ours

    import ayo
    import kernels

    assert SITE_PACKAGES in Path(kernels.__file__).resolve().parents, kernels.__file__
    assert Path(ayo.__file__).resolve().parent == REPO / "ayo"


@pytest.mark.parametrize("where", ["repo root", "parent as ayo/", "unrelated"])
def test_imports_resolve_the_same_from_any_directory(where: str, tmp_path: Path) -> None:
    """``import kernels`` first (as transformers does) from a fresh interpreter: the repo root,
    a parent holding the checkout under the name ``ayo/`` (a namespace package without the fix),
    and an unrelated directory."""
    if where == "repo root":
        cwd = REPO
    elif where == "parent as ayo/":
        cwd = tmp_path
        (tmp_path / "ayo").symlink_to(REPO, target_is_directory=True)
    else:
        cwd = tmp_path
    code = (
        "import ayo, kernels, ayo.kernels, benchmarks\n"
        "import transformers.integrations.hub_kernels\n"
        "print(ayo.__version__, ayo.__file__, kernels.__file__, ayo.kernels.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    _version, ayo_file, kernels_file, ours = out.stdout.split()
    assert Path(ayo_file).resolve() == REPO / "ayo" / "__init__.py"
    assert SITE_PACKAGES in Path(kernels_file).resolve().parents, kernels_file
    assert Path(ours).resolve() == REPO / "kernels" / "__init__.py"


async def _quickstart(cwd: Path, data_dir: Path) -> None:
    server = ServerProcess(data_dir, corpus_limit=12, cwd=cwd)
    await server.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(server.url + "/health") as r:
                assert r.status == 200, await r.text()
            async with s.get(server.url + "/openapi.json") as r:
                assert r.status == 200, await r.text()
            body = {"inputs": {"question": "What is a black hole?"}}
            async with s.post(server.url + "/v1/apps/naive_rag/query", json=body) as r:
                answer = await r.json()
                assert r.status == 200, answer
            assert isinstance(answer["outputs"]["answer"], str) and answer["outputs"]["answer"]
            async with s.get(server.url + "/v1/models") as r:
                models = [m["id"] for m in (await r.json())["data"]]
            model = next(m for m in models if not m.startswith("app:"))
            chat = {"model": model, "messages": [{"role": "user", "content": "Hi!"}]}
            chat["max_tokens"] = 8
            async with s.post(server.url + "/v1/chat/completions", json=chat) as r:
                reply = await r.json()
                assert r.status == 200, reply
            assert reply["choices"][0]["message"]["content"]
            assert reply["usage"]["completion_tokens"] >= 1
    except BaseException:
        server.kill()
        raise
    began = time.monotonic()
    code = await server.stop(timeout=10)
    assert code == 0, server.log()
    assert time.monotonic() - began < 10
    assert "closed the engines" in server.log()
    assert SITE_PACKAGES in _hf_kernels_dir(server.log()).parents, server.log()


@pytest.mark.slow  # a real server start (models load): ~15 s on 2 cores
async def test_quickstart_from_the_repo_root(tmp_path: Path) -> None:
    await _quickstart(REPO, tmp_path / "data")


@pytest.mark.slow  # a real server start (models load): ~15 s on 2 cores
async def test_quickstart_from_an_unrelated_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    await _quickstart(elsewhere, tmp_path / "data")
