"""Slow checks (`make test-slow`): real cpu-quick training, minutes each. Not in the default run.

Costs are asserted as counted work (forward passes, probe records), never as wall-clock limits: time on a
shared machine is not a property of the code. Wall times are printed for information; the timing belongs to
the benchmark command.
"""

import pytest
from test_probes import check_default_probe_work, probe_work

from training.presets import resolve

pytestmark = pytest.mark.slow


def test_default_probes_on_the_cpu_quick_shape_add_at_most_ten_percent_forward_work(data, tmp_path):
    """The real cpu-quick model and batch, 150 steps, with and without the default probes."""
    work = probe_work("cpu-quick", tmp_path, max_steps=150)
    without, with_probes = work[False]["wall_time_s"], work[True]["wall_time_s"]
    print(f"wall time without probes {without:.1f}s, with {with_probes:.1f}s (information only)")
    check_default_probe_work(work, resolve("cpu-quick", {"max_steps": 150}).train)
