"""Agree or raise on every rank: the one cross-rank input check of meshshard.

A rank that raises while the others go on into a collective leaves them waiting until the
process group's timeout; ranks that disagree on dtype, shape or split sizes corrupt memory or hang.
Every such check in meshshard goes through :func:`agree`: each rank reports a short integer vector
(an error kind flag, then named :class:`Field` values) in one tiny all-to-all, every rank reads the
same table and so takes the same decision, and a failure raises
:class:`~meshshard.distributed.CollectiveMismatchError` on every rank, naming the failing ranks,
the fields and every rank's values. Only when some rank failed locally does a second gather carry
the failing ranks' messages.

Built on :func:`agree`:

* :func:`raise_together` / :func:`run_together`: a rank-local exception reaches every rank.
* :func:`check_same_across_ranks`: integers that must be equal on every rank.
* :func:`agree_on_mesh`: the same check on a DeviceMesh, one table per mesh-dim group (ShardTensor's
  layouts: ranks of one mesh dim must agree on that dim's sizes, not on the other dims').

The switch :func:`validation` (a context manager) turns off, for the calling thread, the checks
that the collectives of :mod:`meshshard.distributed.autograd` run on every call; it must be used
identically on every rank. :func:`raise_together` and :func:`check_same_across_ranks` always run,
because they carry real errors rather than guard against inconsistent inputs.

Example::

    import meshshard.distributed as msd

    with msd.validation(False):     # a hot loop whose inputs are known to match on every rank
        for _ in range(100):
            y = g.exchange(x)
    msd.run_together(lambda: load(path), "load")  # a missing file on one rank raises on all
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Callable, Iterator, List, Optional, Sequence, Union

import torch

from meshshard.distributed.comm import CollectiveMismatchError, all_gather_object, all_to_all_single
from meshshard.distributed.process_group import comm_device, get_world_size, is_initialized

__all__ = [
    "DTYPES",
    "dtype_code",
    "dtype_name",
    "Field",
    "validation",
    "get_validation",
    "set_validation",
    "agree",
    "raise_together",
    "run_together",
    "check_same_across_ranks",
    "agree_on_mesh",
    "CollectiveTypeError",
]

# The one dtype code table of the package (codes travel between ranks, so every rank must use it).
DTYPES = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
)


def dtype_code(dtype: torch.dtype) -> int:
    """Small int naming ``dtype`` the same way on every rank.

    Args:
        dtype: any torch dtype.

    Returns:
        Its index in :data:`DTYPES`, or a stable code ``>= 1000`` derived from its name.
    """
    if dtype in DTYPES:
        return DTYPES.index(dtype)
    return 1000 + sum(ord(c) * 31**i for i, c in enumerate(str(dtype))) % 1_000_000


def dtype_name(code: int) -> str:
    """The name (``"float32"``) of a :func:`dtype_code`, for messages.

    Args:
        code: a dtype code; one outside :data:`DTYPES` renders as ``dtype#<code>``.
    """
    return str(DTYPES[code]).replace("torch.", "") if 0 <= code < len(DTYPES) else f"dtype#{code}"


class CollectiveTypeError(CollectiveMismatchError, TypeError):
    """:class:`CollectiveMismatchError` raised on every rank when the first failing rank's error
    was a ``TypeError`` (so ``except TypeError`` and ``except ValueError`` both catch it)."""


class Field:
    """One named group of integers that every rank reports to :func:`agree`.

    Args:
        name: shown in messages (``"dtype"``, ``"sizes"``).
        values: the integers, the same count on every rank (shape ``[k]``).
        render: formats one rank's values for messages (default: the int, or the list).
        must_match: ``False`` for values compared only by :func:`agree`'s ``cross_check``.
    """

    __slots__ = ("name", "values", "render", "must_match")

    def __init__(self, name: str, values: Sequence[int], render: Optional[Callable] = None, must_match: bool = True):
        self.name = name
        self.values = [int(v) for v in values]
        self.render = render or (lambda v: str(v[0]) if len(v) == 1 else str(list(v)))
        self.must_match = must_match


# ---------------------------------------------------------------------------------------------
# the validation switch (per thread)
# ---------------------------------------------------------------------------------------------

_STATE = threading.local()


def get_validation() -> bool:
    """Whether the collectives check their inputs across ranks in the calling thread (default on)."""
    return getattr(_STATE, "enabled", True)


@contextlib.contextmanager
def validation(enabled: bool) -> Iterator[None]:
    """Turn the per-call cross-rank input check of the collectives on or off inside a ``with`` block.

    The check costs one all-to-all of a few integers per call (and a device sync for index range
    checks). Turn it off only in hot loops whose inputs are known to match, identically on every
    rank: with it off, inputs that are wrong on one rank raise only there and the other ranks may
    block until the process group's timeout. The setting is per thread (a backward pass that
    autograd runs in its own device thread validates as by default) and the previous setting is
    restored on exit, also when the block raises.

    Args:
        enabled: ``True`` to validate, ``False`` to skip.
    """
    previous = get_validation()
    _STATE.enabled = bool(enabled)
    try:
        yield
    finally:
        _STATE.enabled = previous


def set_validation(enabled: bool) -> bool:
    """Deprecated: use ``with meshshard.distributed.validation(enabled):``.

    Sets the calling thread's switch (see :func:`validation`) until changed again.

    Args:
        enabled: ``True`` to validate, ``False`` to skip.

    Returns:
        The previous setting.
    """
    warnings.warn("set_validation is deprecated; use `with meshshard.distributed.validation(enabled):`",
                  DeprecationWarning, stacklevel=2)
    previous = get_validation()
    _STATE.enabled = bool(enabled)
    return previous


# ---------------------------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------------------------

_OK, _FAILED, _FAILED_TYPE = 0, 1, 2


def _gather_ints(vector: List[int], world: int, group) -> List[List[int]]:
    """Every rank's equally long int vector, as a ``W x k`` list.

    One all-to-all of ``W`` copies rather than an all-gather: gloo runs the all-to-all's pairs
    concurrently, while its ring all-gather takes ``W - 1`` steps (about half the latency at
    ``W = 4``), and this latency is the whole cost of the check.
    """
    k = len(vector)
    send = torch.tensor(vector * world, dtype=torch.int64, device=comm_device(group))
    recv = all_to_all_single(send, [k] * world, [k] * world, group=group)
    return recv.view(world, k).tolist()


def _exchange_failures(what: str, table: List[List[int]], message: Optional[str], group) -> None:
    bad = [r for r, row in enumerate(table) if row[0] != _OK]
    if not bad:
        return
    # Every rank sees the flags, so every rank joins this second (rare) gather of messages.
    messages = all_gather_object(message, group)
    by_message: dict = {}  # one cause that every rank hit is told once, with its ranks
    for r in bad:
        by_message.setdefault(messages[r], []).append(r)
    detail = "; ".join((f"rank {rs[0]}" if len(rs) == 1 else f"ranks {', '.join(map(str, rs))}") + f": {m}"
                       for m, rs in by_message.items())
    cls = CollectiveTypeError if table[bad[0]][0] == _FAILED_TYPE else CollectiveMismatchError
    raise cls(f"{what}: invalid input on rank(s) {bad} ({detail})")


def agree(
    what: str,
    group=None,
    errors: Sequence[str] = (),
    fields: Union[Sequence[Field], Callable[[], Sequence[Field]]] = (),
    cross_check: Optional[Callable[[List[List[List[int]]]], Optional[str]]] = None,
    validate: Optional[bool] = None,
) -> Optional[List[List[int]]]:
    """Raise the same error on every rank if any rank's input is invalid or ranks disagree.

    Args:
        what: the calling operation, first word of every message.
        group: process group (``None``: the default group).
        errors: this rank's local problems (messages); empty when its input is fine.
        fields: :class:`Field` values that must be equal on every rank, or a callable returning
            them (built only when the check runs).
        cross_check: gets, per rank, the list of field values (``[W][num_fields][k]``) and
            returns a message for relations that are not plain equality, or ``None``.
        validate: ``None`` follows :func:`get_validation`; ``True`` checks anyway.

    Returns:
        Every rank's field values, ``W`` rows of the concatenated ``values``, or ``None`` when
        nothing was exchanged (one process, or validation off).

    Raises:
        CollectiveMismatchError: on every rank, naming the ranks with local errors and their
            messages, or each field the ranks disagree on with every rank's value. Without a
            process group (or with validation off) a local error raises ``ValueError`` here only.
    """
    world = get_world_size(group)
    on = get_validation() if validate is None else bool(validate)
    if world == 1 or not on or not is_initialized():
        if errors:
            raise ValueError(f"{what}: {'; '.join(errors)}")
        return None
    fields = list(fields() if callable(fields) else fields)
    vector = [_FAILED if errors else _OK]
    for f in fields:
        vector.extend(f.values)
    table = _gather_ints(vector, world, group)
    _exchange_failures(what, table, "; ".join(errors) if errors else None, group)
    per_rank: List[List[List[int]]] = [[] for _ in range(world)]
    problems = []
    col = 1
    for f in fields:
        values = [row[col:col + len(f.values)] for row in table]
        col += len(f.values)
        for r in range(world):
            per_rank[r].append(values[r])
        if f.must_match and any(v != values[0] for v in values):
            problems.append(f"ranks do not match on {f.name} ("
                            + "; ".join(f"rank {r}: {f.render(values[r])}" for r in range(world)) + ")")
    if not problems and cross_check is not None:
        message = cross_check(per_rank)
        if message:
            problems.append(message)
    if problems:
        raise CollectiveMismatchError(f"{what}: " + "; ".join(problems))
    return [row[1:] for row in table]


def raise_together(err: Optional[BaseException], what: str, group=None) -> None:
    """Raise on every rank if ``err`` is set on any rank (a collective: every rank must call it).

    Args:
        err: this rank's exception, or ``None``.
        what: the calling operation, for the message.
        group: process group (``None``: the default group).

    Raises:
        The original ``err`` unchanged without a process group; otherwise, on every rank,
        :class:`CollectiveMismatchError` naming each failing rank with its exception type and
        message (a :class:`CollectiveTypeError` if the first failing rank's error was a
        ``TypeError``), chained to the local ``err`` where there is one.
    """
    if get_world_size(group) == 1 or not is_initialized():
        if err is not None:
            raise err
        return
    code = _OK if err is None else _FAILED_TYPE if isinstance(err, TypeError) else _FAILED
    table = _gather_ints([code], get_world_size(group), group)
    try:
        _exchange_failures(what, table, None if err is None else f"{type(err).__name__}: {err}", group)
    except CollectiveMismatchError as agreed:
        raise agreed from err


def run_together(fn: Callable, what: str, group=None):
    """Run the local step ``fn`` on every rank; if it raises on any rank, raise on every rank.

    Args:
        fn: a callable with no arguments (e.g. reading this rank's file).
        what: the calling operation, for the message.
        group: process group (``None``: the default group).

    Returns:
        ``fn()``'s result (when no rank failed).

    Raises:
        As :func:`raise_together`.
    """
    err, out = None, None
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - any local failure must reach the other ranks
        err = exc
    raise_together(err, what, group)
    return out


def agree_on_mesh(what: str, groups: Sequence, row: Callable[[int], List[int]],
                  judge: Callable[[int, List[List[int]]], Optional[str]], error: Optional[str] = None
                  ) -> List[List[List[int]]]:
    """:func:`agree` on a device mesh: one table per mesh-dim group, a failure reaching every rank.

    Round ``m`` gathers, inside this rank's group of mesh dim ``m``, every rank's ``row(m)``
    (prefixed with the error flag), and ``judge`` reads that table (identical on every rank of
    the group). A last pass ORs the failure flag along every mesh dim (rows, then columns ...), so
    a problem seen by one group raises on every rank of the mesh.

    Args:
        what: the calling operation, first words of every message.
        groups: the process group of every mesh dim, in mesh-dim order (the same order on every rank).
        row: ``m -> list[int]``: this rank's integers for mesh dim ``m`` (one length per group).
        judge: ``(m, table) -> message or None`` on the ``W_m x k`` table of round ``m`` (without flags).
        error: this rank's local problem, if any (it raises this message, ``ValueError``).

    Returns:
        The table of every round (flags removed).

    Raises:
        ValueError: on a rank with a local ``error``.
        CollectiveMismatchError: on every other rank when any rank had an error or any ``judge``
            found a problem, with the judge's message where this rank's group saw it.
    """
    problem: Optional[str] = None
    tables: List[List[List[int]]] = []
    for m, group in enumerate(groups):  # every round runs on every rank, so nobody is left waiting
        table = _gather_ints([_OK if error is None and problem is None else _FAILED] + list(row(m)),
                             get_world_size(group), group)
        tables.append([r[1:] for r in table])
        if problem is None:
            bad = [r for r, t in enumerate(table) if t[0] != _OK]
            problem = (f"invalid input on rank(s) {bad} of mesh dim {m} (see their error)" if bad
                       else judge(m, tables[-1]))
    failed = error is not None or problem is not None
    if len(groups) > 1:
        for group in groups:
            failed = any(t[0] for t in _gather_ints([int(failed)], get_world_size(group), group))
    if error is not None:
        raise ValueError(f"{what}: {error}")
    if problem is not None:
        raise CollectiveMismatchError(f"{what}: {problem}")
    if failed:
        raise CollectiveMismatchError(f"{what}: another rank of the device mesh found inconsistent input "
                                      "(see its error)")
    return tables


def check_same_across_ranks(values: Sequence[int], what: str, names: Optional[Sequence[str]] = None,
                            group=None) -> torch.Tensor:
    """Raise :class:`CollectiveMismatchError` on *every* rank unless all ranks pass equal ``values``.

    Args:
        values: ``k`` integers that must agree (e.g. dtype code, ndim, feature sizes).
        what: the name of the calling operation, for the message.
        names: optional names of the values, for the message (default ``value0``, ...).
        group: process group (``None``: the default group).

    Returns:
        The gathered ``LongTensor [W, k]`` (``[1, k]`` without a process group).
    """
    values = [int(v) for v in values]
    names = list(names) if names is not None else [f"value{i}" for i in range(len(values))]
    if len(names) != len(values):
        raise ValueError(f"{what}: {len(names)} names for {len(values)} values")
    table = agree(what, group, fields=[Field(n, [v]) for n, v in zip(names, values)], validate=True)
    return torch.tensor([values] if table is None else table, dtype=torch.int64)
