"""The before/after table of issue 11: each hostile case as a subprocess against one checkout.

    python notes/hostile_table.py REPO_DIR OUT.md [case-name ...]

Runs every case with REPO_DIR as cwd (so that checkout's code is imported) and
writes a markdown table: case, exit code, last stderr line, whether files that
existed before are byte-identical after. Uses RESIDUAL_DATA_DIR; the "full disk"
and "read-only" cases need root (a tiny tmpfs and a read-only tmpfs).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(sys.argv[1]).resolve()
PY = sys.executable
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
COMMON = ["--preset", "smoke", "--no-progress", "--set", "max_steps=20", "--set", "ckpt_interval=10"]
WORK = Path(tempfile.mkdtemp(prefix="hostile-"))
RUN = "smoke/full/seed1337"


def sh(args, cwd=REPO, timeout=300):
    env = dict(ENV)
    if args and args[0] == "ENV":  # ["ENV", {extra env}, *args]
        env.update(args[1])
        args = args[2:]
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def train(out, *extra):
    r = sh([PY, "-m", "training", "--out", str(out), *COMMON, *extra])
    assert r.returncode == 0, r.stderr[-2000:]


def snapshot(root):
    return {p: p.read_bytes() for p in Path(root).rglob("*") if p.is_file()} if Path(root).exists() else {}


# fixtures, built once with this checkout's own code
FIX = WORK / "fix"
train(FIX / "full")
train(FIX / "attn", "--residual", "attn_only")
r = sh([PY, "-m", "experiments.routing_test", "--out", str(FIX / "exp"), "--preset", "smoke", "--variants", "full",
        "--no-progress", "--no-report", "--set", "max_steps=20", "--set", "ckpt_interval=10"])
assert r.returncode == 0, r.stderr[-2000:]
CORPUS = Path(os.environ["RESIDUAL_DATA_DIR"]) / "tinyshakespeare" / "input.txt"


def copy(name, dst):
    shutil.copytree(FIX / name, dst)
    return dst


def interrupted(dst):
    copy("full", dst)
    (dst / RUN / "final.json").unlink()
    return dst


def corrupt_line(path, number=2):
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = '{"step": 5, "train_lo\n'
    path.write_text("".join(lines))


def empty_ckpt(d):
    (d / "e.pt").write_bytes(b"")
    return d / "e.pt"


def ckpt_without(key):
    def make(d):
        import torch

        payload = torch.load(FIX / "full" / RUN / "ckpt.pt", weights_only=True)
        del payload[key]
        torch.save(payload, d / "k.pt")
        return d / "k.pt"
    return make


TRAIN = [PY, "-m", "training", *COMMON]


def case_training(setup, *extra):
    def run(d):
        out = setup(d)
        return [*TRAIN, "--out", str(out), *extra]
    return run


def lib(code_template, make):
    def run(d):
        path = make(d)
        return [PY, "-c", code_template.format(path=str(path))]
    return run


LOAD = "from interp import load_checkpoint; load_checkpoint({path!r})"
HOOKED = "from interp.hooked import to_hooked_transformer; to_hooked_transformer({path!r})"


def plot(make, *extra):
    def run(d):
        return [PY, "-m", "interp.plot_attention", "--ckpt", str(make(d)), "--text", "RO", "--out",
                str(d / "a.html"), *extra]
    return run


def experiment(name, setup, *extra):
    def run(d):
        out = setup(d)
        return [PY, "-m", f"experiments.{name}", "--out", str(out), "--preset", "smoke", "--no-progress",
                "--no-report", "--set", "max_steps=20", "--set", "ckpt_interval=10", *extra]
    return run


def a_file(d):
    (d / "f").write_text("x")
    return d / "f"


def full_disk(d):
    mnt = d / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=120k", "tmpfs", str(mnt)], check=True)
    return mnt


def read_only(d):
    mnt = d / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mnt)], check=True)
    return mnt


def with_corrupt(name):
    def make(d):
        out = interrupted(d / "o")
        corrupt_line(out / RUN / name)
        return out
    return make


def truncated(fname, finished=True):
    def make(d):
        out = copy("full", d / "o")
        if not finished:
            (out / RUN / "final.json").unlink()
        p = out / RUN / fname
        p.write_bytes(p.read_bytes()[:20])
        return out
    return make


def foreign(d):
    out = copy("full", d / "o")
    run = out / "smoke/ffn_only/seed1337"
    run.mkdir(parents=True)
    shutil.copy(FIX / "attn" / "smoke/attn_only/seed1337/ckpt.pt", run / "ckpt.pt")
    return out


def short_corpus(d):
    """A RESIDUAL_DATA_DIR whose corpus is a truncated copy: the same command, other data."""
    (d / "data" / "tinyshakespeare").mkdir(parents=True)
    (d / "data" / "tinyshakespeare" / "input.txt").write_text(CORPUS.read_text()[:900_000])
    return copy("full", d / "o")


def exp_corrupt(d):
    out = copy("exp", d / "o")
    corrupt_line(out / RUN / "metrics.jsonl")
    return out


def exp_truncated_final(d):
    out = copy("exp", d / "o")
    p = out / RUN / "final.json"
    p.write_bytes(p.read_bytes()[:20])
    return out


CASES = {
    "training: corrupt metrics line, interrupted run": case_training(with_corrupt("metrics.jsonl")),
    "training: corrupt probes line, interrupted run": case_training(with_corrupt("probes.jsonl")),
    "training: attn_only ckpt in ffn_only run dir": case_training(foreign, "--residual", "ffn_only"),
    "training: truncated corpus copy, finished run": None,  # built below (needs --data)
    "training: truncated corpus copy, interrupted run": None,
    "training: --out names a file": case_training(a_file),
    "training: read-only --out": case_training(read_only),
    "training: full disk": case_training(full_disk),
    "training: truncated config.json": case_training(truncated("config.json", finished=False)),
    "training: truncated final.json": case_training(truncated("final.json")),
    "training: empty ckpt.pt, interrupted run": None,
    "training: ckpt without optimizer": None,
    "training: --set device=cuda": case_training(lambda d: d / "o", "--set", "device=cuda"),
    "training: --variant ../../x": case_training(lambda d: d / "o" / "out", "--variant", "../../x"),
    "load_checkpoint: empty file": lib(LOAD, empty_ckpt),
    "load_checkpoint: no weights": lib(LOAD + ".weights['x']", ckpt_without("weights")),
    "to_hooked_transformer: empty ckpt": lib(HOOKED, empty_ckpt),
    "to_hooked_transformer: ckpt without weights": lib(HOOKED, ckpt_without("weights")),
    "plot_attention: empty ckpt": plot(empty_ckpt),
    "plot_attention: ckpt without weights": plot(ckpt_without("weights")),
    "plot_attention: --out in read-only dir": plot(lambda d: FIX / "full" / RUN / "ckpt.pt"),
    "routing_test: corrupt metrics line in finished run": experiment("routing_test", exp_corrupt, "--variants",
                                                                     "full"),
    "routing_test: truncated final.json": experiment("routing_test", exp_truncated_final, "--variants", "full"),
    "routing_test: --out names a file": experiment("routing_test", a_file, "--variants", "full"),
    "routing_test: read-only --out": experiment("routing_test", read_only, "--variants", "full"),
    "residual_sweep: --out names a file": experiment("residual_sweep", a_file),
    "gain_confound: --out names a file": experiment("gain_confound", a_file),
    "eval_noise: --out names a file": experiment("eval_noise", a_file, "--no-comparison"),
    "eval_noise: --set device=cuda": experiment("eval_noise", lambda d: d / "o", "--no-comparison", "--set",
                                                "device=cuda"),
}


def _short(d):
    out = short_corpus(d)
    return ["ENV", {"RESIDUAL_DATA_DIR": str(d / "data")}, *TRAIN, "--out", str(out)]


def _short_interrupted(d):
    out = short_corpus(d)
    (out / RUN / "final.json").unlink()
    return ["ENV", {"RESIDUAL_DATA_DIR": str(d / "data")}, *TRAIN, "--out", str(out)]


def _empty_ckpt_training(d):
    out = interrupted(d / "o")
    (out / RUN / "ckpt.pt").write_bytes(b"")
    return [*TRAIN, "--out", str(out)]


def _no_optimizer(d):
    out = interrupted(d / "o")
    ckpt_without("optimizer")(d)
    shutil.copy(d / "k.pt", out / RUN / "ckpt.pt")
    return [*TRAIN, "--out", str(out)]


def _plot_ro(d):
    mnt = read_only(d)
    return [PY, "-m", "interp.plot_attention", "--ckpt", str(FIX / "full" / RUN / "ckpt.pt"), "--text", "RO",
            "--out", str(mnt / "a.html")]


CASES["training: truncated corpus copy, finished run"] = _short
CASES["training: truncated corpus copy, interrupted run"] = _short_interrupted
CASES["training: empty ckpt.pt, interrupted run"] = _empty_ckpt_training
CASES["training: ckpt without optimizer"] = _no_optimizer
CASES["plot_attention: --out in read-only dir"] = _plot_ro


def ctrl_c(d):
    """SIGINT once the first metrics record is on disk."""
    out = d / "o"
    p = subprocess.Popen([*TRAIN, "--out", str(out), "--set", "max_steps=400"], cwd=REPO, env=ENV,
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                         # a background shell starts it with SIGINT ignored
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    metrics = out / RUN / "metrics.jsonl"
    while p.poll() is None and not (metrics.exists() and metrics.stat().st_size):
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=120)[1]
    return p.returncode, err


def race(d):
    """Two processes on the same --out, started together."""
    out = d / "o"
    args = [*TRAIN, "--out", str(out), "--set", "max_steps=40"]
    ps = [subprocess.Popen(args, cwd=REPO, env=ENV, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
          for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in ps]
    steps = [str(json.loads(line)["step"]) for line in (out / RUN / "metrics.jsonl").read_text().splitlines()]
    loser = min(results, key=lambda r: -r[0])
    return loser[0], loser[1] + f"\n[rcs {[r[0] for r in results]}; metrics steps: {' '.join(steps)}]"


SPECIAL = {"training: Ctrl-C after the first metrics record": ctrl_c, "training: two processes, same --out": race}


def main():
    wanted = sys.argv[3:]
    rows = []
    for name, fn in {**CASES, **SPECIAL}.items():
        if wanted and not any(w in name for w in wanted):
            continue
        d = WORK / f"case{len(rows)}"
        d.mkdir()
        try:
            if name in SPECIAL:
                rc, err = SPECIAL[name](d)
                intact = "-"
            else:
                args = fn(d)
                before = snapshot(d)
                r = sh(args)
                rc, err = r.returncode, r.stderr
                after = snapshot(d)
                intact = "yes" if all(after.get(p) == b for p, b in before.items()) else "NO"
        finally:
            for m in ("full", "ro"):
                if (d / m).is_dir():
                    subprocess.run(["umount", str(d / m)], capture_output=True)
        lines = [x for x in err.strip().splitlines() if x.strip()]
        last = lines[-1] if lines else ""
        n_err = sum(x.startswith("error:") for x in lines)
        tb = "Traceback" in err
        rows.append((name, rc, n_err, tb, intact, last[:220].replace("|", "\\|")))
        print(rows[-1], flush=True)
    with open(sys.argv[2], "w") as f:
        f.write("| case | exit | error: lines | traceback | files intact | last stderr line |\n")
        f.write("|---|---|---|---|---|---|\n")
        for name, rc, n, tb, intact, last in rows:
            f.write(f"| {name} | {rc} | {n} | {'yes' if tb else 'no'} | {intact} | `{last}` |\n")


main()
