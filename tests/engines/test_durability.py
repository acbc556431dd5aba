"""Durability: SIGKILL an ingesting process after acknowledged batches; restart; all there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np

from ayo.engines import RetrievalStore

from .fakes import HashEncoder, hash_vector

ROOT = Path(__file__).resolve().parents[2]
BATCH = 25

_WRITER = textwrap.dedent(
    f"""
    import asyncio, sys
    from ayo.engines import Document, RetrievalStore
    from tests.engines.fakes import HashEncoder

    async def main(path):
        store = RetrievalStore(path, HashEncoder())
        store.create_collection("c")
        batch = 0
        while True:
            docs = [Document(id=f"b{{batch}}-{{i}}", text=f"batch {{batch}} doc {{i}} " * 5)
                    for i in range({BATCH})]
            await store.ingest("c", docs)
            print(f"ACK {{batch}}", flush=True)
            batch += 1

    asyncio.run(main(sys.argv[1]))
    """
)


def _run_until_acks(data_dir: Path, wanted: int) -> list[int]:
    """Start the writer, SIGKILL it right after its ``wanted``-th acknowledgement."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(data_dir)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    timer = threading.Timer(60, proc.kill)  # never hang the suite
    timer.start()
    acked: list[int] = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("ACK "):
                acked.append(int(line.split()[1]))
                if len(acked) == wanted:
                    os.kill(proc.pid, signal.SIGKILL)  # mid-way through the next batch
                    break
    finally:
        timer.cancel()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()  # type: ignore[union-attr]
    return acked


def test_acknowledged_documents_survive_sigkill(tmp_path):
    acked = _run_until_acks(tmp_path, wanted=3)
    assert acked == [0, 1, 2]

    store = RetrievalStore(tmp_path, HashEncoder())  # restart: the index catches up
    for batch in acked:
        for i in range(BATCH):
            doc = store.store.get_document("c", f"b{batch}-{i}")
            assert doc is not None, f"acknowledged b{batch}-{i} lost"
    stored_ids = store.store.chunk_ids("c")
    # Whatever was in flight is all-or-nothing (one transaction per ingest).
    assert len(stored_ids) % BATCH == 0 and len(stored_ids) >= 3 * BATCH
    # Every stored chunk has its vector in the index, equal to the embedding of its text.
    np.testing.assert_array_equal(np.sort(store.vectors.ids("c")), stored_ids)
    _, texts = store.store.chunk_texts("c")
    expected = np.stack([hash_vector(t, 16) for t in texts])
    np.testing.assert_array_equal(store.vectors.get("c", stored_ids), expected)
    store.close()
