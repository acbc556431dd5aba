"""``benchmarks.quality``'s splits and figures: the held-apart split shares no question with
the tuning split; accuracy given gold in context is a conditional rate, not a ratio of rates."""

import importlib.util

import pytest

from ayo.engines.corpus import WIKI_PACKAGE
from benchmarks.quality import REPORTED, Cell, splits

DATA = ("fanoutqa", WIKI_PACKAGE)


def test_accuracy_given_gold_counts_only_questions_with_gold_in_context():
    cell = Cell("naive_rag", "tune", "float32", "chat", True)
    cell.correct = [True, True, False, False]
    cell.hits = [True, False, True, True]
    assert cell.accuracy == 0.5
    assert cell.accuracy_given_gold == pytest.approx(1 / 3)
    assert Cell("a", "tune", "float32", "chat", True).accuracy_given_gold is None


@pytest.mark.skipif(
    any(importlib.util.find_spec(p) is None for p in DATA),
    reason=f"the question data packages {DATA} are not installed",
)
def test_the_held_split_is_apart_from_the_tuning_split():
    parts = splits(30, seed=0)
    tune, held = parts["tune"], parts["held"]
    assert [q.text for q in tune[: len(REPORTED)]] == [r[0] for r in REPORTED]
    assert len(tune) == len(REPORTED) + 30 and len(held) > 30
    assert not {q.text for q in tune} & {q.text for q in held}
    assert splits(30, seed=0) == parts  # seeded: the same split every run
