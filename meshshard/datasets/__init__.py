"""meshshard.datasets."""

__all__ = []
