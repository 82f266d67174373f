"""What happens when a plain ``torch.Tensor`` meets a ShardTensor in an element-wise op, ``cat`` or ``stack``.

The plain tensor is taken to be a Replicate value: every rank must pass the same one, and each
rank uses the rows of it that meet its own shard. Whether meshshard says so is the promotion
mode, one per process:

* ``"warn"`` (default): a :class:`PromotionWarning` (a ``UserWarning``), shown once per op and
  call site by Python's warning filters;
* ``"raise"``: a ``TypeError`` naming the op, for code that must state every replicated value
  (wrap it with ``ShardTensor.from_local(t, mesh, (Replicate(),))``). For Python operators
  (``x * t``) torch turns any TypeError into ``NotImplemented``, so the error is Python's own
  TypeError ``unsupported operand type(s) for *: 'ShardTensor' and 'Tensor'``;
* ``"silent"``: promote without a word.

0-d tensors (scalars), ``nn.Parameter`` (replicated by contract, as in DDP) and views of a
parameter (``self.pos_embed[None]``) are promoted in every mode without a warning or an error.

Example::

    import meshshard.tensor as mt
    mt.set_promotion("raise")           # from now on
    with mt.promotion("silent"):        # only inside the block
        y = x * plain_weights
"""
from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["PromotionWarning", "PROMOTION_MODES", "set_promotion", "get_promotion", "promotion"]

PROMOTION_MODES = ("raise", "warn", "silent")
_mode = "warn"


class PromotionWarning(UserWarning):
    """A plain tensor met a ShardTensor in an element-wise op, ``cat`` or ``stack`` and was promoted to
    Replicate (every rank must pass the same value). Shown once per op; 0-d tensors,
    ``nn.Parameter`` (replicated by contract, as in DDP) and views of one promote silently. See :func:`set_promotion`."""


def _check(mode) -> str:
    if mode not in PROMOTION_MODES:
        raise ValueError(f"promotion mode must be one of {PROMOTION_MODES}, got {mode!r}")
    return mode


def set_promotion(mode: str) -> str:
    """Set what a plain tensor meeting a ShardTensor does, for the whole process.

    Args:
        mode: ``"warn"`` (default: :class:`PromotionWarning`), ``"raise"`` (``TypeError`` naming the
            op) or ``"silent"``.

    Returns:
        The previous mode.
    """
    global _mode
    previous, _mode = _mode, _check(mode)
    return previous


def get_promotion() -> str:
    """The current promotion mode: ``"raise"``, ``"warn"`` or ``"silent"``."""
    return _mode


@contextlib.contextmanager
def promotion(mode: str) -> Iterator[str]:
    """Context manager: the promotion mode ``mode`` inside the block, the previous one after it
    (also when the block raises).

    Args:
        mode: ``"raise"``, ``"warn"`` or ``"silent"``.

    Returns:
        A context manager yielding ``mode``.
    """
    previous = set_promotion(mode)
    try:
        yield mode
    finally:
        set_promotion(previous)
