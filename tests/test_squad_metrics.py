"""SQuAD v1.1 metrics against values worked out by hand (see comments)."""

from __future__ import annotations

import pytest

from workshop.training.squad_metrics import exact_match, f1, normalize_answer, squad_scores


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The  Eiffel Tower!", "eiffel tower"),
        ("An apple, a day", "apple day"),
        # Articles are removed only as whole words: "theatre", "another" stay.
        ("Theatre of another era", "theatre of another era"),
        ("  Bell\tLabs.\n", "bell labs"),
        # Punctuation is removed before articles, so "the," is still an article.
        ("the, end", "end"),
        ("1,000-year", "1000year"),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_exact_match_ignores_articles_case_and_punctuation() -> None:
    assert exact_match("the Eiffel Tower", ["Eiffel Tower"]) == 1.0
    assert exact_match("EIFFEL TOWER.", ["the eiffel tower"]) == 1.0


def test_exact_match_rejects_partial_answer() -> None:
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0
    assert exact_match("Eiffel Tower Paris", ["Eiffel Tower"]) == 0.0


def test_f1_identical_is_one() -> None:
    assert f1("the Eiffel Tower", ["Eiffel Tower"]) == pytest.approx(1.0)


def test_f1_partial_overlap_precision_below_recall() -> None:
    # pred -> [big, red, barn, door] (4), gold -> [red, barn] (2), common = 2
    # P = 2/4 = 0.5, R = 2/2 = 1, F1 = 2*0.5*1 / 1.5 = 2/3
    assert f1("the big red barn door", ["red barn"]) == pytest.approx(2 / 3)


def test_f1_partial_overlap_recall_below_precision() -> None:
    # pred -> [1953], gold -> [in, 1953]; common = 1
    # P = 1/1, R = 1/2, F1 = 2*1*0.5 / 1.5 = 2/3
    assert f1("1953", ["in 1953"]) == pytest.approx(2 / 3)
    # pred -> [in, year, 1953], gold -> [1953]; P = 1/3, R = 1, F1 = (2/3)/(4/3) = 0.5
    assert f1("in the year 1953", ["1953"]) == pytest.approx(0.5)


def test_f1_counts_repeated_tokens_as_a_multiset() -> None:
    # pred -> [cat, cat, cat], gold -> [cat]; common = min(3, 1) = 1
    # P = 1/3, R = 1, F1 = (2/3)/(4/3) = 0.5
    assert f1("the cat cat cat", ["cat"]) == pytest.approx(0.5)
    # pred -> [cat, cat], gold -> [cat, cat, dog]; common = min(2, 2) = 2
    # P = 2/2 = 1, R = 2/3, F1 = (4/3)/(5/3) = 0.8
    # (a set intersection would count 1 common token and give 0.4)
    assert f1("cat cat", ["the cat, cat, dog"]) == pytest.approx(0.8)


def test_f1_no_overlap_is_zero() -> None:
    assert f1("red", ["blue"]) == 0.0


def test_max_over_several_golds() -> None:
    golds = ["Bell Laboratories", "Bell Labs in New Jersey", "labs"]
    # vs "Bell Laboratories": common 1, P = 1/2, R = 1/2 -> 0.5
    # vs "Bell Labs in New Jersey": common 2, P = 1, R = 2/5 -> 0.8/1.4 = 4/7
    # vs "labs": common 1, P = 1/2, R = 1 -> 2/3  <- the max
    assert f1("Bell Labs", golds) == pytest.approx(2 / 3)
    assert exact_match("Bell Labs", golds) == 0.0
    assert exact_match("Bell Labs", golds + ["bell labs."]) == 1.0
    assert f1("Bell Labs", golds + ["bell labs."]) == pytest.approx(1.0)


def test_empty_prediction_scores_zero() -> None:
    assert exact_match("", ["Eiffel Tower"]) == 0.0
    assert f1("", ["Eiffel Tower"]) == 0.0


def test_official_quirk_prediction_that_normalizes_to_empty() -> None:
    # "The" and "a." both normalize to "", so EM is 1, but the official v1.1
    # F1 has no common tokens and returns 0.
    assert exact_match("The", ["a."]) == 1.0
    assert f1("The", ["a."]) == 0.0


def test_empty_gold_list_is_an_error() -> None:
    with pytest.raises(ValueError):
        f1("x", [])
    with pytest.raises(ValueError):
        exact_match("x", "x")  # a bare string is not a list of golds


def test_squad_scores_are_percentages_averaged_over_questions() -> None:
    preds = ["Eiffel Tower", "1953", "red"]
    golds = [["the Eiffel Tower"], ["in 1953", "1952"], ["blue"]]
    # EM: 1, 0, 0 -> 100/3 ; F1: 1, 2/3, 0 -> (5/3)/3 = 5/9 -> 55.56 %
    scores = squad_scores(preds, golds)
    assert set(scores) == {"exact_match", "f1"}
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(500 / 9)


def test_squad_scores_perfect_and_length_mismatch() -> None:
    assert squad_scores(["a cat"], [["Cat!"]]) == {"exact_match": 100.0, "f1": 100.0}
    with pytest.raises(ValueError):
        squad_scores(["a", "b"], [["a"]])
    with pytest.raises(ValueError):
        squad_scores([], [])
