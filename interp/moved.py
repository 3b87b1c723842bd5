"""Old module paths that moved in the restructure, importable still (a notebook's `import experiments.frame`).

One table per package; install_old_paths() puts a finder on sys.meta_path that hands out the module now at the new path
(the same module object, so `experiments.frame is experiments.shared.frame`) with a DeprecationWarning naming it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = {
    "interp.hooked": "interp.tl.hooked",
    "interp.bridge": "interp.tl.bridge",
    "interp.export": "interp.tl.load",
    "interp.tl_major": "interp.tl.major",
    "interp.nanogpt_format": "interp.nanogpt.format",
    "interp.bridge_adapter": "interp.tl.bridge_adapter",
    "interp.hooked.export": "interp.tl.hooked.exported",
    **{f"interp.hooked.{m}": f"interp.tl.hooked.{m}" for m in ("caches", "convert", "persist", "rewire")},
    "experiments.common": "experiments.shared.text",
    **{f"experiments.{m}": f"experiments.shared.{m}" for m in ("frame", "launch", "options", "plan", "stats")},
    "experiments.adam_invariance": "experiments.gain_confound.adam_invariance",
    "experiments.intervention_effects": "experiments.interventions.effects",
    "experiments.intervention_report": "experiments.interventions.report",
    "experiments.intervention_rules": "experiments.interventions.rules",
    "experiments.phase_boundary": "experiments.phase_diagram.boundary",
    "experiments.phase_grid": "experiments.phase_diagram.grid",
    "experiments.phase_predictor": "experiments.phase_diagram.collapse_predictor",
    "experiments.phase_report": "experiments.phase_diagram.report",
    "experiments.routing_report": "experiments.routing_test.report",
    "experiments.routing_rules": "experiments.routing_test.rules",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}; import that", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(MOVED[spec.name])
        self.real_spec = module.__spec__  # the import system is about to put the old name's spec on it
        return module

    def exec_module(self, module: ModuleType) -> None:
        # Nothing to run (the module at the new path has run already); give it back its own spec and loader,
        # or runpy and reload would find this finder's spec on the real module.
        module.__spec__ = self.real_spec
        module.__loader__ = self.real_spec.loader if self.real_spec is not None else None


def install_old_paths() -> None:
    if not any(isinstance(f, _Moved) for f in sys.meta_path):
        sys.meta_path.insert(0, _Moved())  # first: interp.hooked.persist is a moved name, not a new module
