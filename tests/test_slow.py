"""Slow checks (`make test-slow`): real cpu-quick training, minutes each. Not in the default run."""

import pytest

from training.presets import resolve
from training.trainer import Trainer

pytestmark = pytest.mark.slow


def test_probes_at_default_interval_cost_at_most_ten_percent(shared_data, tmp_path):
    """Side by side, same run length: cpu-quick shape, 150 steps, with and without the default probes."""
    from probes import default_callbacks

    times = {}
    for probes in (False, True, False, True):
        spec = resolve("cpu-quick", {"max_steps": 150, "probes": probes})
        callbacks = default_callbacks(spec.train) if probes else []
        run = tmp_path / f"{probes}-{len(times)}"
        final = Trainer(spec.model, spec.train, run, callbacks=callbacks, progress=False).run()
        times.setdefault(probes, []).append(final["wall_time_s"])
    without, with_probes = min(times[False]), min(times[True])
    print(f"wall time without probes {without:.1f}s, with {with_probes:.1f}s: +{with_probes / without - 1:.1%}")
    assert with_probes <= 1.10 * without
