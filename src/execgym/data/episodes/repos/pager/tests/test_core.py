import pytest

from pager import page_count, paginate


def test_page_count_exact_multiple():
    assert page_count(30, 10) == 3
    assert page_count(0, 10) == 0


def test_first_page():
    page = paginate(list(range(30)), 1, per_page=10)
    assert page.items == list(range(10))
    assert page.has_next and not page.has_previous


def test_bad_per_page():
    with pytest.raises(ValueError):
        page_count(5, 0)
