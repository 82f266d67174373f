"""``F.scaled_dot_product_attention`` over sequences / point sets sharded along dim -2: ring attention.

Every rank keeps its query rows; the K/V blocks travel around the ranks (one block in flight,
:func:`meshshard.distributed.ring.ring_shift`) and are folded in with an online softmax (running
row max and sum, accumulated in float32 for low-precision inputs and in the input dtype
otherwise), so no rank ever holds the whole K/V. Backward is the ring once more: each rank
recomputes its score blocks from the saved log-sum-exp and the K/V block passes by together with
its gradient accumulators, which arrive back at their owner after a full turn. Memory per rank:
its own q, k, v, output and one block of scores, never all of K/V.

A replicated query against sharded K/V (a few tokens attending to many sharded points, as in
Transolver-style models) needs no ring: every rank scores the whole query against its own K/V rows
and keeps the partial softmax statistics (row max, row sum of exponentials, unnormalised output);
one all-reduce of the maxima and one of the sums merge them (the log-sum-exp merge), and the output
is Replicate. Backward is autograd through that merge: each rank's gradients of its K/V rows are
exact, and the query's gradient, a sum over the ranks' key blocks, is all-reduced once.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from meshshard.distributed import ReduceOp, Replicate, all_reduce
from meshshard.distributed.autograd import all_reduce_sum
from meshshard.distributed.ring import ring_shift
from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor.spec import shard_dim_of
from meshshard.tensor._ops._common import WAY_OUT, is_replicated, local_of, op_name, reference, register, wrap

__all__ = ["sdpa_handler", "ring_attention", "replicated_query_attention"]


def _acc_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


class _Blocks:
    """Where the query rows and every rank's K/V block sit in the global [Lq, Lk] score matrix."""

    def __init__(self, q_offset, nq, k_sizes, mask, causal, scale):
        self.q_offset, self.nq, self.k_sizes = q_offset, nq, list(k_sizes)
        self.k_offsets = [sum(self.k_sizes[:j]) for j in range(len(self.k_sizes))]
        self.causal, self.scale = causal, scale
        if mask is not None and mask.dim() >= 2 and mask.shape[-2] != 1:
            mask = mask.narrow(-2, q_offset, nq)
        self.mask = mask

    def scores(self, q, kb, owner):
        """Scaled scores of this rank's queries against the K block of rank ``owner`` (masked: -inf)."""
        s = torch.matmul(q, kb.transpose(-1, -2)) * self.scale
        start, n = self.k_offsets[owner], self.k_sizes[owner]
        if self.mask is not None:
            m = self.mask if self.mask.dim() < 1 or self.mask.shape[-1] == 1 else self.mask.narrow(-1, start, n)
            if m.dtype == torch.bool:
                s = s.masked_fill(~m, float("-inf"))
            else:
                s = s + m.to(s.dtype)
        if self.causal:
            qi = torch.arange(self.q_offset, self.q_offset + self.nq, device=s.device)
            kj = torch.arange(start, start + n, device=s.device)
            s = s.masked_fill(kj[None, :] > qi[:, None], float("-inf"))
        return s


class _RingAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, blocks, rank, group):
        acc = _acc_dtype(q.dtype)
        world = len(blocks.k_sizes)
        qa = q.to(acc)
        lead, ev = q.shape[:-2], v.shape[-1]
        m = torch.full(lead + (q.shape[-2],), float("-inf"), dtype=acc, device=q.device)
        l = torch.zeros_like(m)
        o = torch.zeros(lead + (q.shape[-2], ev), dtype=acc, device=q.device)
        kv = torch.cat([k, v], dim=-1)
        for step in range(world):  # at step s a rank holds the block of rank - s
            owner = (rank - step) % world
            if step:
                kv = ring_shift(kv, kv.shape[:-2] + (blocks.k_sizes[owner], kv.shape[-1]), group=group)
            kb, vb = kv[..., : k.shape[-1]].to(acc), kv[..., k.shape[-1]:].to(acc)
            s = blocks.scores(qa, kb, owner)
            m_new = torch.maximum(m, s.amax(-1)) if s.shape[-1] else m
            safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - safe[..., None])
            corr = torch.exp(m - safe)
            l = l * corr + p.sum(-1)
            o = o * corr[..., None] + torch.matmul(p, vb)
            m = m_new
        out = torch.where(l[..., None] > 0, o / l.clamp_min(torch.finfo(acc).tiny)[..., None], torch.zeros_like(o))
        lse = torch.where(l > 0, m + torch.log(l.clamp_min(torch.finfo(acc).tiny)), torch.full_like(m, float("-inf")))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.blocks, ctx.rank, ctx.group = blocks, rank, group
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        blocks, rank, group = ctx.blocks, ctx.rank, ctx.group
        acc = out.dtype
        world = len(blocks.k_sizes)
        qa, do = q.to(acc), d_out.to(acc)
        delta = (do * out).sum(-1, keepdim=True)
        safe_lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None]
        dq = torch.zeros_like(qa)
        ek = k.shape[-1]
        ev = v.shape[-1]
        # the travelling block: [k | v | dk | dv] in the accumulator dtype, one message per step
        blk = torch.cat([k.to(acc), v.to(acc), torch.zeros_like(k, dtype=acc), torch.zeros_like(v, dtype=acc)], -1)
        for step in range(world):
            owner = (rank - step) % world
            if step:
                blk = ring_shift(blk, blk.shape[:-2] + (blocks.k_sizes[owner], blk.shape[-1]), group=group)
            kb, vb = blk[..., :ek], blk[..., ek:ek + ev]
            s = blocks.scores(qa, kb, owner)
            p = torch.exp(s - safe_lse)
            p = torch.where(torch.isinf(lse)[..., None], torch.zeros_like(p), p)
            dv = torch.matmul(p.transpose(-1, -2), do)
            ds = p * (torch.matmul(do, vb.transpose(-1, -2)) - delta)
            dq = dq + torch.matmul(ds, kb) * blocks.scale
            dk = torch.matmul(ds.transpose(-1, -2), qa) * blocks.scale
            blk = torch.cat([blk[..., :ek + ev], blk[..., ek + ev:2 * ek + ev] + dk, blk[..., 2 * ek + ev:] + dv], -1)
        grads = blk[..., ek + ev:]
        if world > 1:  # one more hop brings every block's gradients home (k, v not needed any more)
            grads = ring_shift(grads, grads.shape[:-2] + (blocks.k_sizes[rank], grads.shape[-1]), group=group)
        dk, dv = grads[..., :ek], grads[..., ek:]
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_sizes, q_offset: int, rank: int,
                   group=None, attn_mask=None, is_causal: bool = False, scale=None) -> torch.Tensor:
    """Exact softmax attention of this rank's query rows against K/V sharded over ``group`` by rows
    (plain tensors; every rank of ``group`` calls it together; differentiable).

    Args:
        q: this rank's queries ``[*, nq, E]`` (global rows ``q_offset .. q_offset + nq``).
        k: this rank's keys ``[*, k_sizes[rank], E]``; leading dims ``*`` as in ``q``.
        v: this rank's values ``[*, k_sizes[rank], Ev]``.
        k_sizes: K/V rows of every rank of ``group`` (the same list on every rank).
        q_offset: global index of this rank's first query row.
        rank: this rank's index in ``group``.
        group: process group along which K/V is sharded (``None``: the default group).
        attn_mask: plain tensor broadcastable to the global ``[*, Lq, Lk]``; bool (True: attend) or
            additive (added to the scores); each rank uses its rows and each block's columns.
        is_causal: mask keys whose global index exceeds the query's (torch's top-left alignment).
        scale: score scale (``None``: ``1 / sqrt(E)``).

    Returns:
        ``[*, nq, Ev]``: this rank's rows of ``softmax(q k^T * scale + mask) v`` (rows with every key
        masked give 0, as torch does).
    """
    scale = 1.0 / (q.shape[-1] ** 0.5) if scale is None else float(scale)
    blocks = _Blocks(q_offset, q.shape[-2], k_sizes, attn_mask, is_causal, scale)
    return _RingAttention.apply(q, k, v, blocks, rank, group)


def replicated_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_sizes, rank: int, group=None,
                               attn_mask=None, is_causal: bool = False, scale=None) -> torch.Tensor:
    """Exact softmax attention of the whole (replicated) query against K/V sharded over ``group`` by
    rows (plain tensors; every rank of ``group`` calls it together; differentiable).

    Each rank computes the partial softmax statistics of the query against its own key rows; one
    all-reduce of the row maxima and one of the row sums and unnormalised outputs merge them.

    Args:
        q: the whole query ``[*, Lq, E]``, the same on every rank.
        k: this rank's keys ``[*, k_sizes[rank], E]``; leading dims ``*`` as in ``q``.
        v: this rank's values ``[*, k_sizes[rank], Ev]``.
        k_sizes: K/V rows of every rank of ``group`` (the same list on every rank).
        rank: this rank's index in ``group``.
        group: process group along which K/V is sharded (``None``: the default group).
        attn_mask: plain tensor broadcastable to the global ``[*, Lq, Lk]``; bool (True: attend) or
            additive; each rank uses its own block of columns.
        is_causal: mask keys whose global index exceeds the query's (torch's top-left alignment).
        scale: score scale (``None``: ``1 / sqrt(E)``).

    Returns:
        ``[*, Lq, Ev]``, the same on every rank. Gradient convention: the returned tensor is one
        replicated value, so every rank must call backward with the same upstream gradient; the
        gradient reaching ``q`` is then this rank's key block's share (the caller sums it over the
        ranks, as ``ShardTensor.to_local(grad_placements=(Partial(),))`` does), those of ``k`` and
        ``v`` are exact for this rank's rows.
    """
    scale = 1.0 / (q.shape[-1] ** 0.5) if scale is None else float(scale)
    acc = _acc_dtype(q.dtype)
    blocks = _Blocks(0, q.shape[-2], k_sizes, attn_mask, is_causal, scale)
    s = blocks.scores(q.to(acc), k.to(acc), rank)                        # [*, Lq, n_rank]
    with torch.no_grad():  # the stabiliser only: the result does not depend on it
        m = s.amax(-1) if s.shape[-1] else torch.full(s.shape[:-1], float("-inf"), dtype=acc, device=s.device)
        m = all_reduce(m.contiguous(), op=ReduceOp.MAX, group=group)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m[..., None])                                      # 0 for masked keys
    stats = torch.cat([torch.matmul(p, v.to(acc)), p.sum(-1, keepdim=True)], -1)
    stats = all_reduce_sum(stats, group=group)                           # merge: sum over key blocks
    o, l = stats[..., :-1], stats[..., -1:]
    out = torch.where(l > 0, o / l.clamp_min(torch.finfo(acc).tiny), torch.zeros_like(o))
    return out.to(q.dtype)


def _parse(args, kwargs):
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    defaults = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
    out = dict(defaults)
    out.update(zip(names, args))
    out.update(kwargs)
    return out


def sdpa_handler(func, types, args, kwargs):
    """``F.scaled_dot_product_attention`` with q, k, v ShardTensors sharded along dim -2 (the
    sequence / points dim) on the same mesh dim (q and k/v may have different lengths and
    layouts; k and v the same layout), or k/v replicated; or q replicated and k/v sharded along
    dim -2 (output Replicate: :func:`replicated_query_attention`). Batch and head dims must not be
    sharded. ``attn_mask`` is a plain tensor over the global ``[Lq, Lk]`` (or a replicated
    ShardTensor); ``dropout_p`` must be 0; ``enable_gqa`` repeats k/v heads locally. All
    replicated: local."""
    a = _parse(args, kwargs)
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    name = op_name(func)
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        if not isinstance(t, ShardTensor):
            raise NotImplementedError(f"ShardTensor: {name} with a plain {what} tensor; make q, k and v "
                                      "ShardTensors (replicated ones for unsharded values)")
    if a["dropout_p"]:
        raise NotImplementedError(f"ShardTensor: {name} with dropout_p={a['dropout_p']} (its random mask "
                                  "could not match one process); apply dropout to the inputs or use 0")
    if isinstance(mask, ShardTensor):
        if not is_replicated(mask):
            raise NotImplementedError(f"ShardTensor: {name} with a sharded attn_mask; pass a plain tensor "
                                      "over the global [Lq, Lk] (each rank uses its rows)")
        mask = mask._local_tensor
    if mask is not None and mask.requires_grad:
        raise NotImplementedError(f"ShardTensor: {name}: gradients of an additive attn_mask are not supported")
    ref = reference(func, [q, k, v])
    sd_q, sd_k, sd_v = (shard_dim_of(t.placements) for t in (q, k, v))
    if sd_q is None and sd_k is None and sd_v is None:
        lq, lk, lv = (local_of(func, t, ref) for t in (q, k, v))
        return wrap(func, func(lq, lk, lv, attn_mask=mask, dropout_p=0.0, is_causal=a["is_causal"],
                               scale=a["scale"], enable_gqa=a["enable_gqa"]), ref)
    if sd_q is None and is_replicated(q) and sd_k is not None:
        return _replicated_query(func, q, k, v, mask, a, sd_k)
    if sd_q is None or sd_q[1] != q.dim() - 2:
        raise NotImplementedError(f"ShardTensor: {name} needs the query sharded along dim -2 (the sequence / "
                                  f"points dim), got {q.placements} for shape {tuple(q.shape)}; {WAY_OUT}")
    if (sd_k is None) != (sd_v is None) or (sd_k is not None and (k.placements != v.placements
                                                                   or k._shard_sizes != v._shard_sizes)):
        raise ValueError(f"ShardTensor: {name}: key and value must have the same layout, got {k.placements} "
                         f"sizes {k._shard_sizes} and {v.placements} sizes {v._shard_sizes}")
    if sd_k is not None and (sd_k[1] != k.dim() - 2 or sd_k[0] != sd_q[0] or k.device_mesh != q.device_mesh):
        raise NotImplementedError(f"ShardTensor: {name}: key / value must be sharded along dim -2 on the query's "
                                  f"mesh dim (or replicated), got {k.placements} for shape {tuple(k.shape)}")
    if q.shape[:-2] != k.shape[:-2] and not a["enable_gqa"]:
        raise ValueError(f"ShardTensor: {name}: batch / head dims of query {tuple(q.shape[:-2])} and key "
                         f"{tuple(k.shape[:-2])} differ")
    mesh_dim = sd_q[0]
    ql = q.to_local()
    if sd_k is None:  # replicated K/V: the whole of it is one block, local
        kl, vl = (local_of(func, t, q) for t in (k, v))
        k_sizes, rank, group = [k.shape[-2]], 0, None
    else:
        kl, vl = k.to_local(), v.to_local()
        k_sizes, rank = list(k._shard_sizes), q.device_mesh.get_local_rank(mesh_dim)
        group = q.device_mesh.get_group(mesh_dim)
    if a["enable_gqa"] and kl.dim() >= 3 and kl.shape[-3] != ql.shape[-3]:
        rep = ql.shape[-3] // kl.shape[-3]
        kl, vl = kl.repeat_interleave(rep, dim=-3), vl.repeat_interleave(rep, dim=-3)
    out = ring_attention(ql, kl, vl, k_sizes, q.offsets(mesh_dim), rank, group=group, attn_mask=mask,
                         is_causal=a["is_causal"], scale=a["scale"])
    return wrap(func, out, q)


def _replicated_query(func, q, k, v, mask, a, sd_k):
    """A replicated query against K/V sharded along dim -2: :func:`replicated_query_attention`,
    output Replicate."""
    name = op_name(func)
    if k.placements != v.placements or k._shard_sizes != v._shard_sizes:
        raise ValueError(f"ShardTensor: {name}: key and value must have the same layout, got {k.placements} "
                         f"sizes {k._shard_sizes} and {v.placements} sizes {v._shard_sizes}")
    if sd_k[1] != k.dim() - 2 or k.device_mesh != q.device_mesh:
        raise NotImplementedError(f"ShardTensor: {name} with a replicated query needs key / value sharded along "
                                  f"dim -2 (the sequence / points dim), got {k.placements} for shape "
                                  f"{tuple(k.shape)}; {WAY_OUT}")
    if q.shape[:-2] != k.shape[:-2] and not a["enable_gqa"]:
        raise ValueError(f"ShardTensor: {name}: batch / head dims of query {tuple(q.shape[:-2])} and key "
                         f"{tuple(k.shape[:-2])} differ")
    mesh_dim = sd_k[0]
    ql = local_of(func, q, k)  # its gradient, one share per key block, is summed over the ranks
    kl, vl = k.to_local(), v.to_local()
    if a["enable_gqa"] and kl.dim() >= 3 and kl.shape[-3] != ql.shape[-3]:
        rep = ql.shape[-3] // kl.shape[-3]
        kl, vl = kl.repeat_interleave(rep, dim=-3), vl.repeat_interleave(rep, dim=-3)
    out = replicated_query_attention(ql, kl, vl, list(k._shard_sizes), q.device_mesh.get_local_rank(mesh_dim),
                                     group=q.device_mesh.get_group(mesh_dim), attn_mask=mask,
                                     is_causal=a["is_causal"], scale=a["scale"])
    return wrap(func, out, q, placements=(Replicate(),) * q.device_mesh.ndim)


register(sdpa_handler, (F.scaled_dot_product_attention,))
