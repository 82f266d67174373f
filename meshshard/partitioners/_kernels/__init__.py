"""Compiled (numba) kernels of the partitioners: private, imported by the modules that call them.

Each module holds the kernels of one algorithm: :mod:`.coarsen` (matching, contraction), :mod:`.fm` (k-way
Fiduccia-Mattheyses), :mod:`.rebalance`, :mod:`.components` (connected pieces of parts and their repair),
:mod:`.grow` (greedy graph growing), :mod:`.bisection` (recursive bisection of the coarsest graph),
:mod:`.axis_split` (recursive coordinate bisection), :mod:`.runs` (weight-balanced runs of an order),
:mod:`.sfc_keys` (space-filling-curve keys), with the shared pieces in :mod:`.csr`, :mod:`.candidates`,
:mod:`.moves`, :mod:`.heap` and :mod:`.tiebreak`. :mod:`.jit` holds the ``njit`` they are compiled with
(cached on disk) and the notice logged while a first compilation runs.

This package imports none of them itself: a partitioner loads only the kernels it calls.
"""
__all__: list = []
