import pytest

from ledger.invoice import Line
from ledger.report import Sale


@pytest.fixture
def lines():
    return [Line("widget", 3, 1250), Line("gadget", 1, 99)]


@pytest.fixture
def sales():
    return [Sale(3, "ACME", 150000), Sale(1, "Initech", 2500), Sale(7, "ACME", -550)]
