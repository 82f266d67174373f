"""meshshard.io."""

__all__ = []
