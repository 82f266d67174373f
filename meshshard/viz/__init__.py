"""meshshard.viz: partition and field plots (matplotlib, rendered off-screen; layer 4).

- :func:`plot_partition`: cells / points coloured by part, ghost nodes marked, zoom where parts meet.
- :func:`plot_part_sizes`: bar chart of nodes per part.
- :func:`plot_partition_summary`: both plus the quality numbers, in one figure (used by the CLI).
- :func:`plot_field`: a point field on the mesh (2D filled contours, 3D boundary surface, point clouds).
- :func:`plot_field_comparison`: truth, prediction and error side by side.
- :func:`plot_rollout_error`: a rollout's error against its step.
- :func:`animate_field_comparison`, :func:`animate_field`: a time series (a rollout's ``.pvd``) as a
  ``.gif`` / ``.mp4``, truth | prediction | error per frame, colour limits fixed over all frames
  (:class:`FieldAnimation`, :func:`read_frames`).
"""
from meshshard.viz.animation import (ANIMATION_SUFFIXES, FieldAnimation, animate_field, animate_field_comparison,
                                     check_animation_path, read_frames)
from meshshard.viz.colors import part_colormap, part_colors
from meshshard.viz.field_plot import (DEFAULT_VIEW, field_values, plot_field, plot_field_comparison,
                                      prediction_field_names)
from meshshard.viz.rollout_plot import plot_rollout_error
from meshshard.viz.partition_plot import (auto_zoom_box, cut_zoom_box, ghost_mask, mesh_zoom_box, plot_part_sizes,
                                          plot_partition, plot_partition_summary)

__all__ = ["plot_partition", "plot_part_sizes", "plot_partition_summary", "ghost_mask", "auto_zoom_box", "mesh_zoom_box",
           "cut_zoom_box", "part_colors", "part_colormap", "plot_field", "plot_field_comparison", "field_values",
           "prediction_field_names", "DEFAULT_VIEW", "plot_rollout_error", "FieldAnimation", "animate_field",
           "animate_field_comparison", "read_frames", "check_animation_path", "ANIMATION_SUFFIXES"]
