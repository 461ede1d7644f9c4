"""The CI subset of the hostile-input corpus (about 40 cases across every class, seed 0): each must be handled.

The whole corpus (about 400 cases) runs with ``python bench/hostile.py``; tests/hostile/harness.py says what each
column means. The subset runs once per session over two processes; each case is its own test, failing with the case
id, its column and the one-line reason.
"""

from __future__ import annotations

import pytest

from corpus import CLASSES, build_corpus, fast_subset
from harness import COLUMNS, Result, run_cases

SEED = 0
CASES = fast_subset(build_corpus(SEED))


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    work = tmp_path_factory.mktemp("hostile")
    return {r.id: r for r in run_cases(SEED, [c.id for c in CASES], jobs=2, workdir=work)}


def test_the_subset_spans_every_class() -> None:
    assert {c.cls for c in CASES} == set(CLASSES) and 35 <= len(CASES) <= 45


def test_the_corpus_is_seeded() -> None:
    a, b = build_corpus(SEED), build_corpus(SEED)
    assert len(a) >= 300 and [c.id for c in a] == [c.id for c in b] and len({c.id for c in a}) == len(a)
    assert [c.note for c in build_corpus(SEED + 1, "fr")] != [c.note for c in build_corpus(SEED, "fr")]


@pytest.mark.parametrize("case_id", [c.id for c in CASES])
def test_case_is_handled(results: dict[str, Result], case_id: str) -> None:
    r = results[case_id]
    assert r.column in COLUMNS
    assert r.column == "handled", f"{case_id} [{r.column}]: {r.reason}"
