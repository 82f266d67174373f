"""meshshard.viz."""

__all__ = []
