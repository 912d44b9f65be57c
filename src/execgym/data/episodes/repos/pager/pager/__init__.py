"""pager: split sequences into numbered pages."""

from pager.core import Page, page_count, paginate

__all__ = ["Page", "page_count", "paginate"]
__version__ = "0.3.1"
