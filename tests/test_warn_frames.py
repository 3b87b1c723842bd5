"""A toolkit warning warns and goes on from whatever frame it is issued at: a file, python -c, standard input, exec,
a notebook cell, a pickler's __reduce__ (issue 58: warn_explicit asked __main__'s loader for source it lacked)."""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import interp
from interp.errors import ToolkitWarning, warn_each_call

ROOT = Path(interp.__file__).resolve().parents[1]  # the toolkit under test, wherever it lies
TESTS = Path(__file__).resolve().parent

# Each warning the script issues, then the line that says it went on. `export` adds the issue's own case:
# torch.save of an attn_only export's state_dict (WeightsOnlyWarning from inside the pickler).
SCRIPT = """
import pickle, sys, warnings
warnings.simplefilter("always")
from interp.errors import ToolkitWarning, warn_each_call
warn_each_call("at-top-level", ToolkitWarning)
class Saved:
    def __reduce__(self):
        warn_each_call("in-reduce", ToolkitWarning)
        return (dict, ())
pickle.dumps(Saved())
exec("warn_each_call('in-exec', ToolkitWarning)", {"warn_each_call": warn_each_call, "ToolkitWarning": ToolkitWarning})
if "export" in sys.argv:
    import io, torch
    from api_models import tiny_model
    from interp.tl.hooked.convert import to_hooked_transformer
    torch.save(to_hooked_transformer(tiny_model(residual="attn_only")).state_dict(), io.BytesIO())
print("went on")
"""
MESSAGES = ("ToolkitWarning: at-top-level", "ToolkitWarning: in-reduce", "ToolkitWarning: in-exec")


def run_python(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )


def assert_warned_and_went_on(done: subprocess.CompletedProcess, *also: str) -> None:
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["went", "on"]
    for message in (*MESSAGES, *also):
        assert message in done.stderr


def test_a_warning_from_python_c_warns_and_goes_on():
    assert_warned_and_went_on(run_python("-c", SCRIPT, "export"), "WeightsOnlyWarning")


def test_a_warning_from_standard_input_warns_and_goes_on():
    assert_warned_and_went_on(run_python("-", "export", stdin=SCRIPT), "WeightsOnlyWarning")


def test_a_warning_from_a_file_warns_at_its_line(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    done = run_python(str(script))
    assert_warned_and_went_on(done)
    assert f"{script}:5: ToolkitWarning: at-top-level" in done.stderr  # the user's own line, source shown
    assert 'warn_each_call("at-top-level", ToolkitWarning)' in done.stderr


def test_a_warning_from_a_notebook_cell_warns_and_goes_on():
    pytest.importorskip("IPython")
    driver = (  # a cell runs as IPython runs it: compiled as <ipython-input-...>, in the shell's user namespace
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        f"sys.exit(0 if InteractiveShell.instance().run_cell({SCRIPT!r}).success else 1)\n"
    )
    assert_warned_and_went_on(run_python("-c", driver))


class RaisingLoader:
    """A loader whose get_source fails, as a notebook's or an embedding application's may."""

    @staticmethod
    def get_source(name):
        raise RuntimeError(f"no source for {name}")


class BytesLoader:
    """A loader whose get_source answers bytes (linecache would hand them to the warning's formatting)."""

    @staticmethod
    def get_source(name):
        return b"\n\nwarn_each_call('from exec', ToolkitWarning)\n"


class OnceLoader:
    """A loader that gives its source once and fails when asked again (linecache asks after the toolkit has)."""

    def __init__(self):
        self.asked = 0

    def get_source(self, name):
        self.asked += 1
        if self.asked > 1:
            raise ValueError("fails on the second call")
        return "\n\nwarn_each_call('from exec', ToolkitWarning)\n"


@pytest.mark.parametrize(
    "frame_globals",
    [
        {},  # exec with bare globals: no __name__, no loader
        {"__name__": "__main__", "__loader__": importlib.machinery.BuiltinImporter},  # python -c's __main__
        {"__name__": "__main__", "__loader__": RaisingLoader},
        {"__name__": "__main__", "__loader__": BytesLoader},
        {"__name__": "cell", "__loader__": OnceLoader()},
        {"__name__": 5, "__loader__": None},  # a __name__ that is not a string
        {"__name__": None},
    ],
    ids=["bare", "builtin-loader", "raising-loader", "bytes-loader", "once-loader", "odd-name", "none-name"],
)
def test_a_warning_from_exec_warns_at_the_exec_line_whatever_its_globals(frame_globals):
    code = compile("\n\nwarn_each_call('from exec', ToolkitWarning)", "<ipython-input-3-c0ffee>", "exec")
    with pytest.warns(ToolkitWarning, match="from exec") as caught:
        exec(code, {**frame_globals, "warn_each_call": warn_each_call, "ToolkitWarning": ToolkitWarning})
    assert (caught[0].filename, caught[0].lineno) == ("<ipython-input-3-c0ffee>", 3)


def test_a_users_error_filter_still_turns_the_warning_into_an_error():
    """Going on is for frames without source; the user's own filters still decide, 'error' included."""
    frame_globals = {"__name__": "__main__", "__loader__": importlib.machinery.BuiltinImporter}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ToolkitWarning, match="refused"):
            exec(
                "warn_each_call('refused', ToolkitWarning)",
                {**frame_globals, "warn_each_call": warn_each_call, "ToolkitWarning": ToolkitWarning},
            )


@pytest.mark.parametrize("name", [None, 5, b"main"])
def test_the_exports_warnings_go_on_from_a_frame_whose_name_is_not_a_string(name):
    """state_dict's caller check and the untrained-token warning read the calling frame's module name too."""
    import io

    import torch
    from test_hooked import convert, make_model

    from interp.errors import UntrainedTokenWarning, WeightsOnlyWarning

    tl = convert(make_model("random", residual="attn_only"))
    frame_globals = {"__name__": name, "tl": tl, "torch": torch, "io": io}
    with pytest.warns(WeightsOnlyWarning):
        exec("torch.save(tl.state_dict(), io.BytesIO())", frame_globals)
    with pytest.warns(UntrainedTokenWarning, match="tokens hold id"):
        exec("tl(torch.tensor([[65, 1, 2]]))", frame_globals)


def test_every_warning_class_the_toolkit_defines_is_a_toolkit_warning():
    """warnings.simplefilter('ignore', ToolkitWarning) silences all of them (NonAdditiveResidualWarning was not)."""
    import importlib
    import inspect
    import pkgutil

    found = []
    for info in pkgutil.walk_packages([str(ROOT / "interp")], "interp."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # the other TransformerLens major's modules
            continue
        found += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == info.name]
    warning_classes = {c for c in found if issubclass(c, Warning)}
    assert len(warning_classes) > 10
    assert {c.__name__ for c in warning_classes if not issubclass(c, ToolkitWarning)} == set()


@pytest.mark.parametrize("through", ["load_tl", "to_hooked_transformer"])
def test_the_exports_making_warnings_point_at_the_users_line(tmp_path, through):
    from test_hooked import make_model

    import interp as toolkit
    from interp.errors import NoTokenizerWarning
    from interp.files.checkpoint import save_checkpoint
    from interp.tl.hooked.caches import NonAdditiveResidualWarning

    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, make_model("random", residual="attn_only"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        getattr(toolkit, through)(path)
    ours = [w for w in seen if issubclass(w.category, (NonAdditiveResidualWarning, NoTokenizerWarning))]
    assert len(ours) == 2 and {w.filename for w in ours} == {__file__}, [(w.category, w.filename) for w in seen]


def _toolkit_call():
    """What a toolkit method does: interp.errors.warn attributed to its caller's line."""
    from interp.errors import warn

    warn("from a method", ToolkitWarning, stacklevel=2)


@pytest.mark.parametrize(
    "frame_globals",
    [
        {},
        {"__name__": "__main__", "__loader__": importlib.machinery.BuiltinImporter},
        {"__name__": "__main__", "__loader__": RaisingLoader},
        {"__name__": "__main__", "__loader__": BytesLoader},
        {"__name__": 5},
        {"__name__": None},
    ],
    ids=["bare", "builtin-loader", "raising-loader", "bytes-loader", "odd-name", "none-name"],
)
def test_a_method_warning_called_from_exec_is_seen_whatever_its_globals(frame_globals):
    """interp.errors.warn (TrainModeWarning, LogitAttrsWarning, HiddenRoutingWarning use it) is not dropped where
    Python's warn would drop it (a __name__ of None) and does not raise where a loader fails."""
    code = compile("\ncall()", "<ipython-input-4-c0ffee>", "exec")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(code, {**frame_globals, "call": _toolkit_call})
    assert [str(w.message) for w in caught] == ["from a method"]
    assert (caught[0].filename, caught[0].lineno) == ("<ipython-input-4-c0ffee>", 2)


@pytest.mark.parametrize("name", [None, 5, "__main__"])
def test_the_models_own_warnings_reach_a_frame_whose_name_is_not_a_string(name):
    """A block's W_Q on a routed export, run_with_cache in train mode with dropout: warned from exec, any name."""
    import torch
    from test_hooked import convert, make_model

    from interp.errors import HiddenRoutingWarning, TrainModeWarning

    tl = convert(make_model("random", residual="ffn_only", self_bias=4.0))
    model = make_model("random", dropout=0.1).train()
    frame_globals = {"__name__": name, "tl": tl, "model": model, "torch": torch}
    with pytest.warns(HiddenRoutingWarning):
        exec("tl.blocks[0].attn.W_Q", frame_globals)
    with pytest.warns(TrainModeWarning):
        exec("model.run_with_cache(torch.tensor([[1, 2, 3]]))", frame_globals)
