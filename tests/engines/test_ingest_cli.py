"""``python -m ayo ingest`` on a folder of .txt/.md/.jsonl files (in-process)."""

from __future__ import annotations

import json

import pytest

from ayo.cli.ingest import main
from ayo.engines import DocumentStore
from ayo.runtime.corpus import iter_documents


@pytest.fixture
def folder(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "cats.md").write_text("# Cats\n\nCats are small carnivorous mammals.\n")
    (src / "sub" / "dogs.txt").write_text("Dogs bark.\n")
    (src / "empty.txt").write_text("  \n")
    (src / "skip.csv").write_text("a,b\n")
    rows = [{"id": "j1", "text": "Jupiter is a gas giant.", "title": "Jupiter", "lang": "en"},
            {"text": "Mars is red."}]  # fmt: skip
    (src / "planets.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return src


def test_documents_from_a_folder(folder):
    docs = {d.id: d for d in iter_documents(folder)}
    assert set(docs) == {"cats.md", "sub/dogs.txt", "j1", "planets.jsonl:2"}
    assert docs["cats.md"].title == "Cats" and docs["sub/dogs.txt"].title == "dogs"
    assert docs["j1"].metadata == {"lang": "en"} and docs["j1"].title == "Jupiter"
    bad = folder / "bad.jsonl"
    bad.write_text('{"title": "no text"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1"):
        list(iter_documents(folder))


def test_cli_ingests_then_skips(folder, tmp_path, capsys, minilm):
    data = tmp_path / "data"
    argv = [str(folder), "--collection", "notes", "--data-dir", str(data), "--no-progress"]
    assert main(argv) == 0
    assert "notes: 4 documents (4 chunks" in capsys.readouterr().out
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert "0 documents" in again and "4 already present" in again
    store = DocumentStore(data / "docs.sqlite3")
    assert store.collection("notes").documents == 4 and len(store.chunk_ids("notes")) == 4
    store.close()
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing"), "--collection", "x", "--data-dir", str(data)])
