"""FSDP2 (``fully_shard``) under domain parallelism: make its gradient reduction the gradient rule's sum.

``fully_shard(model, mesh=...)`` reduce-scatters each parameter's gradient over its own mesh and, by
default, divides it by that mesh's size. Under domain decomposition every rank of a sample holds a
*share* of the sample's gradient (see :mod:`meshshard.tensor._gradient_rule`), and the shares must be
summed once over the domain ranks. Two settings of FSDP2's own API do that:

* the divide factor is set to 1 and the reduction op to a plain sum, so FSDP2 sums instead of averaging (as DomainParallel does for
  plain parameters: the gradient of the sum of the ranks' losses);
* when FSDP2's mesh is a sub-mesh of the domain-parallel mesh (``mesh["data"]`` of a
  ``("data", "domain")`` mesh), an all-reduce hook sums FSDP2's reduce-scatter output over the other
  dims (``"domain"``), so the sum runs over every rank.

The sharded gradient FSDP2 then writes into each parameter's ``.grad`` (a DTensor sharded over the
FSDP2 mesh) is the single-process gradient's shard, and the optimizer step on the shards equals the
unsharded one.
"""
from __future__ import annotations

from typing import List, Sequence

import torch
from torch import nn

from meshshard.distributed.comm import all_reduce

__all__ = ["fsdp_modules", "fsdp_managed_parameters", "fsdp_mesh", "sum_fsdp_gradients", "set_fsdp_gradient_sync"]


def _fsdp_module_class():
    from torch.distributed.fsdp import FSDPModule

    return FSDPModule


def fsdp_modules(module: nn.Module) -> List[nn.Module]:
    """The modules of ``module`` (itself included) that ``fully_shard`` was applied to, outermost first."""
    if not any(any(c.__name__ == "FSDPModule" for c in type(m).__mro__) for m in module.modules()):
        return []  # no FSDP2 here: do not import it
    cls = _fsdp_module_class()
    return [m for m in module.modules() if isinstance(m, cls)]


def fsdp_managed_parameters(module: nn.Module) -> List[nn.Parameter]:
    """The parameters of ``module`` that FSDP2 shards (its sharded DTensor parameters)."""
    found, seen = [], set()
    for m in fsdp_modules(module):
        for group in m._get_fsdp_state()._fsdp_param_groups:
            for fp in group.fsdp_params:
                p = fp.sharded_param
                if id(p) not in seen:
                    seen.add(id(p))
                    found.append(p)
    return found


def fsdp_mesh(module: nn.Module):
    """The one ``DeviceMesh`` FSDP2 shards ``module``'s parameters over.

    Raises:
        ValueError: FSDP2 uses several meshes in ``module`` (per-parameter meshes or submodules
            sharded over different meshes), which the domain sum cannot follow.
    """
    meshes = []
    for m in fsdp_modules(module):
        for group in m._get_fsdp_state()._fsdp_param_groups:
            mesh = group.mesh_info.mesh
            if not any(mesh is seen or mesh == seen for seen in meshes):
                meshes.append(mesh)
    if len(meshes) != 1:
        raise ValueError(f"FSDP2 shards this model over {len(meshes)} different meshes; under DomainParallel all "
                         "fully_shard calls must use one mesh (e.g. mesh['data'] of a ('data', 'domain') mesh)")
    return meshes[0]


def sum_fsdp_gradients(module: nn.Module, groups: Sequence) -> None:
    """Make FSDP2's gradient reduction in ``module`` a plain sum, then summed over ``groups`` too.

    Args:
        module: a model with ``fully_shard`` applied (to it or to submodules).
        groups: process groups over which each reduce-scatter output is all-reduced in addition
            (the mesh dims FSDP2 does not reduce over, such as ``"domain"``); empty when FSDP2's mesh
            already holds every rank whose shares must be summed.
    """
    groups = list(groups)

    def hook(reduced: torch.Tensor) -> None:
        for group in groups:
            all_reduce(reduced, group=group)

    for m in fsdp_modules(module):
        m.set_gradient_divide_factor(1.0)
        m.set_force_sum_reduction_for_comms(True)  # a plain SUM (no PREMUL_SUM, which gloo lacks)
        if groups and m._get_fsdp_state()._fsdp_param_groups:
            m.set_all_reduce_hook(hook)


def set_fsdp_gradient_sync(module: nn.Module, sync: bool) -> None:
    """FSDP2's ``set_requires_gradient_sync`` on every FSDP2 module of ``module`` (``no_sync``)."""
    for m in fsdp_modules(module):
        m.set_requires_gradient_sync(sync, recurse=False)
