"""python -m benchmarks.gpu_check (`make gpu-check`): the paper's scale on one GPU that is at hand for minutes.

    make gpu-check                               # on a machine with CUDA: at most 9 minutes on one H200
    python -m benchmarks.gpu_check --dry-run     # the same stages on tiny shapes on this CPU (make test runs it)

Stages, each a child process with its own time budget, then one table (and OUT/gpu_check.txt, .json):

    setup  the wheels the machine lacks, installed from --wheels (pip --no-index --no-deps --target OUT/site)
    a      pytest -m cuda on the test files that mark tests cuda (they skip without CUDA): tests/test_cuda.py
           (an ensemble member against its solo run, a bitwise resume, a CUDA checkpoint loaded on a CPU and
           exported to HookedTransformer, bf16 evaluation against fp32) and the others (the CUDA-graph step, ...)
    b      python -m benchmarks.gpu_step: the step beside the reference (eager, compiled, CUDA graphs,
           deterministic on and off, an ensemble), MFU against the measured bf16 peak
    c      python -m experiments.residual_sweep --preset paper-10m --seeds 1337,...,1344 --set dtype=bfloat16
           --out OUT: Table 1 with 8 seeds (same-shape runs train as ensembles where training.grouping lets
           them) against the paper and against the shipped H200 logs (docs/results/data/residual_sweep-paper_10m-h200)
    e      stage c's sweep with a constant lr from step 0 (--set lr_schedule=constant --set warmup_steps=0,
           seeds 1337-1340, --out OUT/constant-lr), with what time c leaves: the floor page's candidate (attn_only's
           deep floor is the warm-up's) at the paper's scale
    d      python -m experiments.routing_test --preset paper-10m --seeds 1337 --set dtype=bfloat16 --out OUT
           --no-identity, with what time is left (its four residual configs are stage c's seed-1337 runs)

Then the newest prediction file (docs/results/predictions/paper_scale-v*.json, experiments.floor.paper_scale) is
printed beside what c, e and d measured: each arm's predicted probability of a seed on the floor and its count
interval against the count the runs gave, each routing verdict against the one predicted. With --dry-run the same
rows score tiny smoke runs: the plumbing, never a test of the predictions.

A stage past its budget is stopped with SIGINT, as Ctrl-C stops it: pytest still reports the tests that ran, a
training command keeps its checkpoints, and the same command resumes it (finished runs are reused). OUT (default
runs/gpu_check) is an experiment --out that
`python -m experiments.shipping.ship OUT docs/results/data/residual_sweep-gpu_check --experiment residual_sweep`
publishes (and `--experiment routing_test` the routing test), beside gpu_check.json and logs/.

A bare GPU machine (torch and most dependencies, no package index) needs two ignored folders carried along:

    .gpu-wheels/  the wheels (15 MB), fetched on a machine with internet by the line `--wheels-command`
                  prints: pip download --no-deps --only-binary=:all: --python-version 3.12
                    --platform manylinux_2_28_x86_64 -d .gpu-wheels transformer-lens==3.9.0 ... (WHEELS)
    .gpu-data/    the corpus: cp -r ../shared/data/tinyshakespeare .gpu-data/ (or set RESIDUAL_DATA_DIR)

Only the wheels of distributions the machine lacks are installed, into OUT/site, put first on the children's
PYTHONPATH. Without CUDA (and without --dry-run) the command says so in one line and exits 2. It exits 1 where a
stage failed or the newest prediction file could not be scored (edited, damaged, or a pinned version missing).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from interp.command.cli import DocParser, command_main
from interp.errors import ToolkitError, one_line

REPO = Path(__file__).resolve().parents[1]
# What the H200 machine lacked (../shared/h200/README.md), the versions .venv holds, plus pytest for stage a.
WHEELS = (
    "transformer-lens==3.9.0 better-abc==0.0.3 fancy-einsum==0.0.3 beartype==0.23.1 typeguard==4.6.1 "
    "datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 plotly==7.1.0 narwhals==2.29.0 "
    "pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1"
).split()
NEEDED = ("torch", "transformer_lens", "plotly", "pytest", "einops", "jaxtyping", "tiktoken", "scipy", "filelock")
PAPER_SEEDS = ",".join(str(s) for s in range(1337, 1345))
CONSTANT_SEEDS = ",".join(str(s) for s in range(1337, 1341))
CONSTANT_LR = ["--set", "lr_schedule=constant", "--set", "warmup_steps=0"]
DEFAULT_BUDGET_S = 540.0  # 9 minutes of one H200, start to table
DRY_RUN_BUDGET_S = 180.0  # every stage on tiny shapes on 2 CPU cores, with room to spare
CAPS = {"a": 60.0, "b": 90.0}  # c takes what is left, d what c leaves
# with a and b at their caps c still gets issue 49's 360 s target for Table 1: 540 - 60 - 90 - RESERVE_S - STOP_S
ROUTING_MIN_S = 60.0  # d starts only with this much left
RESERVE_S = 15.0  # kept for the table
MAX_BUDGET_S = 86400.0  # --budget-s above a day is a typo (1e308 printed 309 digits)
GRACE_S = 30.0  # after SIGTERM, before SIGKILL: a trainer writes its interrupt line and exits
STOP_S = 15.0  # what a stopped training stage usually takes to exit, kept from its budget


class GpuCheckError(ToolkitError):
    """The GPU check cannot start (no CUDA, no corpus, a dependency neither installed nor among the wheels)."""


@dataclass
class StageRun:
    """One stage as it ran: its command, budget, exit status, seconds, and whether its budget stopped it."""

    key: str
    title: str
    argv: list[str]
    budget_s: float
    rc: int | None = None
    seconds: float = 0.0
    stopped: bool = False
    skipped: str = ""
    log: str = ""
    extra: dict = field(default_factory=dict)


def gpu_check_parser() -> argparse.ArgumentParser:
    p = DocParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n", 2)[2])
    p.add_argument("--dry-run", action="store_true", help="tiny shapes on this CPU, a few steps: the same stages")
    p.add_argument("--out", default="runs/gpu_check", help="the folder it writes (default runs/gpu_check)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help=f"seconds in all (default {DEFAULT_BUDGET_S:.0f}, with --dry-run {DRY_RUN_BUDGET_S:.0f}): stage a at most "
        f"{CAPS['a']:.0f} s, b {CAPS['b']:.0f} s, c what is left, e and then d only with {ROUTING_MIN_S:.0f} s left",
    )
    p.add_argument("--stages", default="abcde", help="which of the stages a, b, c, d, e run (default abcde)")
    p.add_argument("--seeds", default=None, help=f"stage c's seeds (default {PAPER_SEEDS})")
    p.add_argument("--wheels", default=".gpu-wheels", help="the folder of wheels (default .gpu-wheels)")
    p.add_argument("--data-dir", help="the corpus folder (default $RESIDUAL_DATA_DIR, .gpu-data, ../shared/data)")
    p.add_argument("--wheels-command", action="store_true", help="print the pip download line for --wheels, exit")
    return p


def wheels_command(folder: str) -> str:
    return shlex.join(
        ["pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--platform"]
        + ["manylinux_2_28_x86_64", "-d", folder, *WHEELS]
    )


def find_data_dir(option: str | None) -> Path:
    """Where TinyShakespeare is: --data-dir, $RESIDUAL_DATA_DIR, .gpu-data, ../shared/data (no download here)."""
    env = os.environ.get("RESIDUAL_DATA_DIR")
    candidates = [Path(option)] if option else [Path(p) for p in (env,) if p]
    candidates += [] if option else [REPO / ".gpu-data", REPO.parent / "shared" / "data"]
    for path in candidates:
        if (path / "tinyshakespeare" / "input.txt").is_file():
            return path.resolve()
    tried = ", ".join(str(p) for p in candidates)
    raise GpuCheckError(
        f"no TinyShakespeare in {tried} (a GPU machine here has no internet): copy ../shared/data/tinyshakespeare "
        "into .gpu-data/, set RESIDUAL_DATA_DIR, or give --data-dir"
    )


def _missing() -> list[str]:
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def install_wheels(wheels: Path, site: Path) -> str:
    """Install the wheels of distributions this Python lacks into site; what it did, in words."""
    missing = _missing()
    if not missing:
        return "every dependency installed; no wheel needed"
    files = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    todo = [w for w in files if not _installed(w.name.split("-")[0])]
    if not todo:
        raise GpuCheckError(
            f"this Python lacks {', '.join(missing)} and {wheels} holds no wheel for them: on a machine with "
            f"internet run `{wheels_command(str(wheels))}` and carry {wheels}/ here"
        )
    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade"]
    done = subprocess.run([*argv, "--target", str(site), *map(str, todo)], capture_output=True, text=True)
    if done.returncode != 0:
        raise GpuCheckError(f"pip could not install the wheels in {wheels}: {one_line(done.stderr.strip())[-300:]}")
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    still = _missing()
    if still:
        raise GpuCheckError(f"after installing {len(todo)} wheels from {wheels}, still missing: {', '.join(still)}")
    return f"installed {len(todo)} wheels for {', '.join(missing)}"


def cuda_test_files() -> list[str]:
    """The test files that mark tests `cuda` (collecting the whole suite costs a 2-core GPU machine 20 s)."""
    tests = sorted((REPO / "tests").glob("test_*.py"))
    return [str(p.relative_to(REPO)) for p in tests if "pytest.mark.cuda" in p.read_text()]


def plan_stages(args, out: Path) -> list[StageRun]:
    """The four stages' commands, at the paper's shapes or (--dry-run) tiny ones on a CPU."""
    py = [sys.executable, "-m"]
    junit = str(out / "logs" / "pytest-cuda.xml")
    pytest = [*py, "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", f"--junitxml={junit}", *cuda_test_files()]
    step = [*py, "benchmarks.gpu_step", "--json-out", str(out / "gpu_step.json")]
    sets = ["--set", "dtype=bfloat16"]
    sweep = [*py, "experiments.residual_sweep", "--out", str(out), "--no-progress"]
    routing = [*py, "experiments.routing_test", "--out", str(out), "--no-progress", "--no-identity"]
    constant = [*py, "experiments.residual_sweep", "--out", str(out / "constant-lr"), "--no-progress", *CONSTANT_LR]
    preset, seeds = "paper-10m", (args.seeds or PAPER_SEEDS, "1337", CONSTANT_SEEDS)
    if args.dry_run:
        step += ["--device", "cpu", "--shape", "smoke", "--modes", "fp32-det,fp32", "--ensemble", "2"]
        step += ["--steps", "2", "--rounds", "2", "--warmup", "1"]
        sets = [f"--set={s}" for s in ("max_steps=6", "eval_interval=3", "eval_batches=2", "log_interval=2")]
        sets += ["--set=ckpt_interval=3", "--no-report"]
        preset, seeds = "smoke", (args.seeds or "1,2", "1", "1")
    for argv, seed in zip((sweep, routing, constant), seeds, strict=True):
        argv += ["--preset", preset, "--seeds", seed, *sets]
    return [
        StageRun("a", "pytest -m cuda", pytest, CAPS["a"]),
        StageRun("b", "step benchmark", step, CAPS["b"]),
        StageRun("c", "Table 1", sweep, 0.0),
        StageRun("e", "constant lr", constant, 0.0),
        StageRun("d", "routing test", routing, 0.0),
    ]


def run_stage(stage: StageRun, env: dict[str, str], log: Path, cwd: Path = REPO) -> None:
    """The stage's command in its own session, stopped with SIGINT at its budget (SIGKILL after GRACE_S)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    stage.log = str(log)
    start = time.perf_counter()
    with log.open("w") as handle:
        handle.write(f"$ {shlex.join(stage.argv)}\n")
        handle.flush()
        proc = subprocess.Popen(
            stage.argv,
            cwd=cwd,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_stop_with_parent,
        )
        try:
            stage.rc = proc.wait(timeout=max(stage.budget_s, 1.0))
        except subprocess.TimeoutExpired:
            stage.stopped = True
            stage.rc = _stop(proc)
        except BaseException:  # Ctrl-C or SIGTERM of this command: its child stops too, then the interrupt
            _stop(proc)
            raise
    stage.seconds = time.perf_counter() - start


def _stop_with_parent() -> None:
    """In the stage's child: SIGINT when this command dies, even by SIGKILL (Linux), so no stage trains on
    unseen, holding its runs' locks against the rerun."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


def _stop(proc: subprocess.Popen) -> int:
    # SIGINT first: the trainers take it as they take SIGTERM (checkpoint, one line), and pytest ends its session
    # on it, so the junit file of the tests that ran is still written (SIGTERM would lose every result)
    for sig, wait in ((signal.SIGINT, GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)  # the child's own session: it and anything it started, nothing else
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def _budgets(stage: StageRun, left: float) -> str:
    """Set the stage's budget from the seconds left; a reason to skip it, or ''."""
    usable = left - RESERVE_S
    if stage.key in CAPS:
        stage.budget_s = min(stage.budget_s, usable)
    else:  # a stopped trainer takes seconds to exit: kept from the budget too
        stage.budget_s = usable - STOP_S
    if stage.key in "de" and usable < ROUTING_MIN_S:
        return f"{usable:.0f} s left, it needs {ROUTING_MIN_S:.0f} s to start"
    return "" if stage.budget_s >= 10 else f"a budget of {max(stage.budget_s, 0):.0f} s left, under 10 s"


def check_cuda(dry_run: bool) -> str:
    """The device in words; without CUDA and without --dry-run, one GpuCheckError line."""
    try:
        import torch
    except ModuleNotFoundError:
        raise GpuCheckError(
            f"torch is not installed for {sys.executable}: the GPU machine has it; here `make setup` makes .venv, "
            "which make gpu-check then uses"
        ) from None

    if dry_run:
        return f"dry run on this CPU ({os.cpu_count()} cores), torch {torch.__version__}"
    if not torch.cuda.is_available():
        raise GpuCheckError(
            f"no CUDA device here (torch {torch.__version__} sees none): make gpu-check needs a GPU; "
            "`python -m benchmarks.gpu_check --dry-run` runs its stages on tiny shapes on this CPU"
        )
    name = torch.cuda.get_device_name(0)
    return f"{name}, torch {torch.__version__}, CUDA {torch.version.cuda}, {os.cpu_count()} CPU cores"


def _check_options(args) -> None:
    if not args.stages or set(args.stages) - set("abcde") or len(set(args.stages)) != len(args.stages):
        raise GpuCheckError(f"--stages {args.stages!r}: give some of a, b, c, d, e, each once (e.g. abcde)")
    if args.budget_s is not None and not (RESERVE_S < args.budget_s <= MAX_BUDGET_S):  # NaN fails too
        raise GpuCheckError(
            f"--budget-s must be a number of seconds above {RESERVE_S:.0f} (kept for the table) and at most "
            f"{MAX_BUDGET_S:.0f} (a day)"
        )
    if args.seeds is not None:
        from experiments.shared.options import parse_seeds

        parse_seeds(args.seeds, [])


def gpu_check(args) -> int:
    """Every stage in turn, within the budget; the table printed and written. 0 when every stage that ran
    finished with status 0 (a stage its budget stopped is not a failure: it resumes), else 1."""
    start = time.perf_counter()
    _check_options(args)
    device = check_cuda(args.dry_run)
    budget = args.budget_s or (DRY_RUN_BUDGET_S if args.dry_run else DEFAULT_BUDGET_S)
    data = find_data_dir(args.data_dir)
    out = Path(args.out).resolve()
    with _holding(out):
        return _gpu_check(args, start, device, budget, data, out)


@contextlib.contextmanager
def _holding(out: Path):
    """OUT for this command alone: a second check into it would time beside the first and read its files."""
    from filelock import FileLock, Timeout

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GpuCheckError(f"--out {out}: cannot make the folder ({e.strerror or e})") from None
    holder = out / ".gpu_check.holder"
    lock = FileLock(out / ".gpu_check.lock", timeout=0)
    try:
        lock.acquire()
    except Timeout:
        who = holder.read_text().strip() if holder.is_file() else "another process"
        raise GpuCheckError(
            f"--out {out} is in use by another gpu check ({who}); wait for it or give another --out"
        ) from None
    try:
        holder.write_text(f"pid {os.getpid()}\n")
        yield
    finally:
        holder.unlink(missing_ok=True)
        lock.release()


def _gpu_check(args, start: float, device: str, budget: float, data: Path, out: Path) -> int:
    from benchmarks.gpu_rows import gpu_check_table, run_dirs, stage_rows, write_summary

    site = out / "site"
    setup = install_wheels(Path(args.wheels).resolve(), site)
    env = {**os.environ, "RESIDUAL_DATA_DIR": str(data), "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), str(REPO), env.get("PYTHONPATH")) if p)
    print(f"gpu check: {device}; data {data}; {setup}; budget {budget:.0f} s -> {out}", flush=True)
    stages = plan_stages(args, out)
    for stale in (out / "logs" / "pytest-cuda.xml", out / "gpu_step.json"):  # never read as this run's
        stale.unlink(missing_ok=True)
    for stage in stages:
        if stage.key not in args.stages:
            stage.skipped = "not asked (--stages)"
            continue
        stage.skipped = _budgets(stage, budget - (time.perf_counter() - start))
        if stage.skipped:
            continue
        if stage.key == "b":  # the benchmark skips what its own budget cannot fit, and reports the rest
            stage.argv += ["--budget-s", f"{max(stage.budget_s - 25, 10):.0f}"]
        if stage.key == "c":  # Table 1's wall-time target is judged only when this command trained every run
            stage.extra["runs_before"] = len(run_dirs(out))
        print(f"stage {stage.key} ({stage.title}, at most {stage.budget_s:.0f} s): {shlex.join(stage.argv[2:])}")
        run_stage(stage, env, out / "logs" / f"stage-{stage.key}.log")
    rows = stage_rows(stages, out, dry_run=args.dry_run)
    table = gpu_check_table(rows)
    header = f"gpu check: {device}; {time.perf_counter() - start:.0f} s of a {budget:.0f} s budget"
    print("\n" + header + "\n" + table)
    write_summary(out, header, table, stages, rows, {"device": device, "setup": setup, "data": str(data)})
    print(f"\nwritten: {out / 'gpu_check.txt'}, {out / 'gpu_check.json'}; logs in {out / 'logs'}")
    failed = [s for s in stages if s.rc not in (0, None) and not s.stopped]
    unscored = [r["result"] for r in rows if r["stage"] == "p" and r["result"].startswith("not scored")]
    if unscored:  # a damaged, edited or missing prediction file fails the check, not only its row
        print(f"error: the paper-scale predictions were {unscored[0]}")
    return 1 if failed or unscored else 0


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C or SIGTERM: the running stage was stopped first
    return command_main(lambda: _main(argv), "rerun it to resume the training")


def _main(argv: list[str] | None) -> int:
    args = gpu_check_parser().parse_args(argv)
    if args.wheels_command:
        print(wheels_command(args.wheels))
        return 0
    return gpu_check(args)


if __name__ == "__main__":
    from interp.command.cli import guarded_output

    raise SystemExit(guarded_output(main))
