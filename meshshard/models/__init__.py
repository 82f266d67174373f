"""meshshard.models."""

__all__ = []
