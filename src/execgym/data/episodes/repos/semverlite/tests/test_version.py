import pytest

from semverlite import Version, parse


def test_parse():
    assert parse("1.2.3") == Version(1, 2, 3)
    assert parse("0.1.0-rc.1") == Version(0, 1, 0, "rc.1")
    assert str(parse("2.0.0-alpha")) == "2.0.0-alpha"


def test_ordering():
    assert parse("1.0.0-alpha") < parse("1.0.0-alpha.1") < parse("1.0.0-beta") < parse("1.0.0")
    assert parse("1.0.10") > parse("1.0.9")


def test_rejects_garbage():
    with pytest.raises(ValueError):
        parse("1.2")
