"""meshshard.graph."""

__all__ = []
