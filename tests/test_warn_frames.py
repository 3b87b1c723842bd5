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


@pytest.mark.parametrize(
    "frame_globals",
    [
        {},  # exec with bare globals: no __name__, no loader
        {"__name__": "__main__", "__loader__": importlib.machinery.BuiltinImporter},  # python -c's __main__
        {"__name__": "__main__", "__loader__": RaisingLoader},
        {"__name__": 5, "__loader__": None},  # a __name__ that is not a string
    ],
    ids=["bare", "builtin-loader", "raising-loader", "odd-name"],
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
