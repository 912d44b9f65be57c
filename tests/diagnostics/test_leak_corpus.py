"""The leak finder on the planted corpus: every program, and precision and recall >= 0.95.

The same figures are printed by ``benchmarks/diagnostics.py`` and stated in
docs/diagnostics.md.
"""

from __future__ import annotations

import pytest

from execgym.diagnostics import Diagnostics
from tests.diagnostics.planted import Planted, confusion, load_corpus

CORPUS = load_corpus()


def test_the_corpus_has_the_shapes_the_issue_names(corpus: list[Planted]) -> None:
    expected = {item.expect for item in corpus}
    assert {"memory", "descriptor", "thread", "process", "cycle", "native", "none"} <= expected
    assert len(corpus) >= 30
    assert sum(item.expect == "none" for item in corpus) >= 15
    assert {item.name.rsplit(".", 1)[1] for item in corpus} == {"py", "c", "cpp"}


def test_precision_and_recall(
    corpus: list[Planted], corpus_results: dict[str, Diagnostics]
) -> None:
    figures = confusion(corpus, corpus_results)
    assert figures["precision"] >= 0.95, figures
    assert figures["recall"] >= 0.95, figures


@pytest.mark.parametrize("item", CORPUS, ids=[item.name for item in CORPUS])
def test_each_program(item: Planted, corpus_results: dict[str, Diagnostics]) -> None:
    found = corpus_results[item.name]
    assert found.leaks is not None
    assert found.leaks.status == "measured", found.leaks.reason
    leaks = found.leak_list
    if item.expect == "none":
        assert leaks == [], [leak.to_json() for leak in leaks]
        return
    mine = [leak for leak in leaks if leak.kind == item.expect]
    assert mine, f"expected a {item.expect} leak, found {[leak.kind for leak in leaks]}"
    # Attributed to the model's code: a line of the program that allocates or opens it.
    located = [leak for leak in mine if leak.where.line is not None]
    if item.expect != "resident":  # memory outside Python's allocator has no line
        assert located, [leak.to_json() for leak in mine]
    for leak in mine:
        assert leak.total > 0
        if leak.per_call is not None:
            assert leak.per_call > 0
