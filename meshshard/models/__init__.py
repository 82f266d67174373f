"""meshshard.models: MeshGraphNet, which runs on a whole graph or on one rank's ShardedGraph shard.

- :class:`MeshGraphNet`: encode-process-decode of Pfaff et al. (2021); sharded forward and
  gradients equal the single-process ones.
- :class:`MeshGraphNetBlock` (its processor block, a PyG ``MessagePassing`` layer) and :class:`MLP`.
- :func:`train_step`: one optimizer step, on a shard through :class:`meshshard.DomainParallel`
  (the ShardTensor loss ``F.mse_loss(pred, y)``, gradients summed in backward) or on a whole graph.
- :func:`training_checkpoint`, :func:`load_checkpoint`: self-contained checkpoints (weights, model
  configuration, statistics, field specs) that ``meshshard predict`` applies to new meshes.
- :func:`broadcast_parameters`: start replicated parameters equal.
- Low-level helpers for a loop on plain owned rows without ``DomainParallel``:
  :func:`global_mse_loss` (the whole-mesh MSE from each rank's owned rows) and
  :func:`all_reduce_gradients` (sum the gradients over the ranks once, after backward).
- :class:`SimulatorSpec`, :func:`simulator_checkpoint`, :func:`rollout_states`: learned simulators
  (a state to its next step, trained with input noise, rolled out with Dirichlet boundaries);
  :func:`rollout_to_files`: a checkpoint rolled out on a trajectory, its predictions and errors per
  step written as ParaView files (one process, or sharded under torchrun: ``meshshard rollout``).
"""
from meshshard.models.meshgraphnet import MeshGraphNet, MeshGraphNetBlock, ProcessorBlock
from meshshard.models.mlp import MLP
from meshshard.models.training import train_step
from meshshard.models.checkpoint import CheckpointInfo, load_checkpoint, simulator_checkpoint, training_checkpoint
from meshshard.models.simulator import SimulatorSpec, draw_training_steps, rollout_states, training_noise
from meshshard.models.parallel import all_reduce_gradients, broadcast_parameters, global_mse_loss, global_sum_and_count
from meshshard.models.rollout_files import rollout_to_files

__all__ = ["MeshGraphNet", "MeshGraphNetBlock", "ProcessorBlock", "MLP", "global_mse_loss", "global_sum_and_count",
           "all_reduce_gradients", "broadcast_parameters", "train_step", "training_checkpoint", "load_checkpoint",
           "CheckpointInfo", "simulator_checkpoint", "SimulatorSpec", "draw_training_steps", "training_noise",
           "rollout_states", "rollout_to_files"]
