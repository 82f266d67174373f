"""meshshard.tensor."""

__all__ = []
