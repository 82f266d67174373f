"""plot_rollout_error: one line per curve, a log scale for curves spanning decades, the file written."""
import numpy as np
import pytest

from meshshard.viz import plot_rollout_error


def test_curves_scale_and_file(tmp_path):
    fig = plot_rollout_error([0, 1, 2], {"u": [0.0, 0.1, 0.2]}, tmp_path / "e.png")
    ax = fig.axes[0]
    assert [l.get_label() for l in ax.lines] == ["u"] and ax.get_yscale() == "linear"
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), [0.0, 0.1, 0.2])
    assert (tmp_path / "e.png").read_bytes()[:4] == b"\x89PNG"
    fig = plot_rollout_error(range(3), {"u": [1e-6, 1e-3, 1.0], "p": [1, 2, 3]})
    assert fig.axes[0].get_yscale() == "log" and fig.axes[0].get_legend() is not None
    with pytest.raises(ValueError, match="curve 'u' has 2 values for 3 steps"):
        plot_rollout_error([0, 1, 2], {"u": [1, 2]})
    with pytest.raises(ValueError, match="no error curves"):
        plot_rollout_error([0], {})
