"""The installed version of execgym."""

__version__ = "0.1.0"
