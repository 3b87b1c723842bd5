"""The arms a floor command line asks for: controls, the knob's doses, the schedule arms; their options.

An arm is one cell: a residual wiring at one depth, trained for a multiple of the preset's steps at one lr, with
the query/key initial scale (experiments.floor.knob) and a schedule (constant, no warm-up; or the preset's
warm-up and cosine decay). Parts (--parts):

    control    ffn_only at the two depths whose escapes fall inside the run (the fit of the relation)
    knob       the same depths with the query/key scale raised: predicted from the controls before training
    confirm    each knob arm again at 3x its length with the lowest 3 seeds (does its escape last?); with
               schedule (and attn), attn_only's constant-lr arms at depth 6 (and 8) at 3x (does the floor last?)
    schedule   attn_only at depth 6, constant against warm-up + cosine, and ffn_only depth 3 with warm-up
    attn       attn_only at depths 4 and 8 with a constant lr, and depth 6's constant arm with every seed
               (its own floor; not in the default)
    law        ffn_only at a depth the shipped floor runs lack, at the control's query/key scale and at the dose
               the depth-4 held-out arm uses, every seed, constant lr: phase-cell depth 1 at scales 1 and 16
               (600 steps, evaluated every 5 steps) and depth 3 at scale 16 (1200 steps), fitted on beside the
               shipped runs (experiments.floor.law). Depth 1 escapes within a few evaluations, so it is cheap;
               every escape is read as an interval of its run's evaluation grid (not in the default)
    heldout    arms the fit never saw, each predicted before it trains (experiments.floor.law_predictions):
               phase-cell ffn_only at depth 4 with the query/key scale 16 (the control's wait there is past
               3600 steps - 2 of 16 runs had left by 3600 on the escape-time page - so the knob, which the
               law covers through u and which it is fitted on at depths 1 and 3, brings it into reach), 4800
               steps, up to 64 seeds; and ffn_only at depth 2 at width 128 (the fit holds width 64 only), 1200
               steps, 16 seeds; and depth 4 at scale 16 again, 2400 steps, 16 seeds, asked for its own sigma
               (law.predict_arm's spread: added 2026-12-06 once the 4800-step arm's median was no prediction).
               An arm trains the seeds its stored prediction names, and only where its median or its spread is
               a prediction (its interval within law.MAX_FACTOR): one that is not would test nothing, and the
               console says so (not in the default; needs law)
    deep       the paper-124m depth (12 layers) at the preset's width, every seed (not in the default):
               attn_only with paper-124m's warm-up fraction (warmup_steps / max_steps = 2000 / 20000, so 0.1 of
               the arm's length) and cosine decay, attn_only with a constant lr from step 0, and full and
               ffn_only as anchors (constant); each attn_only arm again at 3x with the lowest 3 seeds. The
               gradient probe logs every step to DEEP_DENSE, then every log_interval (GradientProbe).
               Cut to fit 2 cores (written before training, docs/results/floor.md): the length (DEEP_ARMS),
               not the seeds, the width or the depth
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from experiments.floor.knob import scale_qk
from experiments.runner.frame import Context, Group, Variant, check_number
from experiments.runner.text import num
from experiments.shared.options import comma_list
from experiments.shipping.ship import MANIFEST
from interp.errors import ToolkitError

PARTS = ("control", "knob", "confirm", "schedule", "attn", "law", "heldout", "deep")
DEFAULT_PARTS = ("control", "knob", "confirm", "schedule")
CONFIRM_SEEDS = 3  # the project's rule: a verdict that depends on length is checked at 3x with three seeds


@dataclass(frozen=True)
class Arm:
    part: str
    residual: str
    depth: int
    length: int  # a multiple of the preset's max_steps
    scale: float = 1.0  # the query/key initial scale
    schedule: str = "constant"  # "constant" (no warm-up) or "cosine" (the preset's warm-up and cosine decay)
    seeds: int | None = None  # the lowest n of --seeds; None: all of them (heldout: the most it may take)
    width: int | None = None  # d_model; None: the preset's
    every: int | None = None  # the evaluation interval; None: the preset's
    warmup: float | None = None  # cosine's warm-up as a fraction of the arm's length; None: the preset's steps


# preset -> ((depth, control length, knob scales, knob length) per control depth, lr as a multiple of the preset's,
# schedule seeds). phase-cell: depth 2 escapes at a median 175-200 steps within 1200, depth 3 at 1925 within 3600
# (docs/results/escape_time.md, replicated by the controls); the scales sit on the steep part of the dose response
# at init (docs/results/floor.md, "Finding the dose"). Depth 3's knob arm is the scale that moves its collapse most,
# trained 1200 steps: the prediction is read at the arm's own last step, and the control's survival is known there.
PRESET_ARMS = {"smoke": (((1, 6, (8.0,), 6), (2, 6, (8.0,), 6)), 2.0, 2)}
DEFAULT_ARMS = (((2, 2, (8.0, 12.0), 2), (3, 6, (12.0,), 2)), 0.5, 8)

# The deep part: preset -> (depth, length as a multiple of the preset's max_steps, the gradient probe's every-step
# span from step 0). phase-cell: paper-124m's 12 layers for 600 steps, the length chosen by timing depth-12 steps
# here first (274 ms of CPU a member-step in a 16-member ensemble, 302 solo; docs/results/floor.md, "The 124M
# question in miniature"). smoke: a small stand-in the tests run in seconds.
PRESET_DEEP = {"smoke": (3, 1, 10)}
DEEP_ARMS = (12, 1, 50)
DEEP_RESIDUALS = ("attn_only", "full", "ffn_only")  # attn_only under both schedules; full and ffn_only as anchors


# The law part: preset -> (fit arms (depth, scale, length as a multiple of the preset's max_steps, evaluation
# interval or None for the preset's), held-out arms (depth, width or None for the preset's, scale, length, most
# seeds)). phase-cell's depth-1 arms are evaluated every 5 steps, not 25: at 25 their escapes (about 15-40 steps
# by the law as the shipped runs fit it) would all read (0, 25] or (25, 50], a bound and no more.
PRESET_LAW = {"smoke": (((1, 16.0, 6, 5), (2, 16.0, 6, None)), ((2, None, 4.0, 6, 6), (1, 64, 1.0, 6, 4)))}
DEFAULT_LAW = (
    ((1, 1.0, 1, 5), (1, 16.0, 1, 5), (3, 16.0, 2, None)),
    ((4, None, 16.0, 8, 64), (2, 128, 1.0, 2, 16), (4, None, 16.0, 4, 16)),
)


def law_arms(preset: str) -> list[Arm]:
    fit, _ = PRESET_LAW.get(preset, DEFAULT_LAW)
    return [Arm("law", "ffn_only", d, n, scale=s, every=e) for d, s, n, e in fit]


def heldout_arms(preset: str) -> list[Arm]:
    _, held = PRESET_LAW.get(preset, DEFAULT_LAW)
    return [Arm("heldout", "ffn_only", d, n, scale=s, seeds=most, width=w) for d, w, s, n, most in held]


def deep_warmup_fraction() -> float:
    """paper-124m's warm-up as a fraction of its steps (2000 / 20000), read from the preset itself."""
    from training.presets import PRESETS

    train = PRESETS["paper-124m"]["train"]
    return train["warmup_steps"] / train["max_steps"]


def add_arguments(p) -> None:
    g = p.add_argument_group("the arms")
    g.add_argument(
        "--parts",
        help=f"comma-separated parts among {', '.join(PARTS)} (default {','.join(DEFAULT_PARTS)}); the "
        "knob needs the controls (its prediction is fitted on them)",
    )
    g.add_argument(
        "--qk-scales", help="query/key initial scales of the knob arms, each > 0 and not 1 (default 8,12; smoke 8)"
    )
    g.add_argument(
        "--margin",
        type=float,
        default=0.05,
        help="nats below unigram a loss must stay to have escaped (default 0.05, the routing test's)",
    )
    g.add_argument(
        "--init-seeds",
        type=int,
        help="initialisation seeds a cell of the signal-propagation table (default 8; smoke 2)",
    )
    g.add_argument(
        "--law-from",
        help="a shipped floor folder whose runs the law is fitted on beside this --out's, or 'none' "
        "(default: phase-cell docs/results/data/floor-default; other presets none)",
    )
    g.add_argument(
        "--predict-only",
        action="store_true",
        help="with --parts ...,law,heldout: write the held-out arms' predictions once the law's runs have finished, "
        "and train none of the held-out arms (commit the prediction file, then run again without it)",
    )


def parse_parts(text: str | None) -> tuple[str, ...]:
    if text is None:
        return DEFAULT_PARTS
    items = [t.strip() for t in text.split(",")]
    bad = [t for t in items if t not in PARTS]
    if bad or len(set(items)) != len(items):
        raise ToolkitError(f"--parts {text!r}: give distinct parts among {', '.join(PARTS)}")
    if ("knob" in items or "confirm" in items) and "control" not in items:
        raise ToolkitError(
            "--parts knob or confirm needs control too: the knob's prediction is fitted on the control runs"
        )
    if "heldout" in items and "law" not in items:
        raise ToolkitError("--parts heldout needs law too: the held-out arms are predicted once the law's runs finish")
    return tuple(items)


def parse_scales(text: str) -> tuple[float, ...]:
    control = {1.0: "--qk-scales 1 is the control itself; give scales other than 1"}
    return comma_list(text, "--qk-scales", "scale", refuse=control)


def check(args) -> None:
    check_number("--margin", args.margin, 0.0, inclusive=False)
    parts = parse_parts(args.parts)
    if args.qk_scales is not None:
        parse_scales(args.qk_scales)
    given = args.law_from  # a shipped folder or 'none': refused before any work, not once the fit runs trained
    if given not in (None, "none") and not (Path(given) / MANIFEST).is_file():
        raise ToolkitError(f"--law-from {given}: no {MANIFEST} there; give a shipped floor folder or 'none'")
    if getattr(args, "predict_only", False) and "heldout" not in parts:
        raise ToolkitError("--predict-only writes the held-out arms' predictions: give --parts ...,law,heldout")
    if getattr(args, "predict_only", False) and getattr(args, "analyse_only", None) is not None:
        raise ToolkitError("--predict-only and --analyse-only: the predictions are written before training, not after")
    if args.init_seeds is not None and args.init_seeds < 2:
        raise ToolkitError(f"--init-seeds must be >= 2 (an interval needs two), got {args.init_seeds}")
    for item in args.set or []:  # a run's first N steps must not depend on how long it trains
        key, _, value = item.partition("=")
        if key.strip() in ("eval_from", "lr_schedule", "max_steps") + (("warmup_steps",) if "deep" in parts else ()):
            raise ToolkitError(f"--set {item}: the arms set {key.strip()} themselves (experiments.floor.arms)")


class Arms:
    """The arms a command line asks for, and their variants."""

    def __init__(self, ctx: Context):
        args, train = ctx.args, ctx.spec.train
        cells, lr_mult, schedule_seeds = PRESET_ARMS.get(ctx.spec.preset, DEFAULT_ARMS)
        self.parts = parse_parts(args.parts)
        asked = parse_scales(args.qk_scales) if args.qk_scales else None
        controls = tuple((d, n) for d, n, _, _ in cells)
        self.scales = {d: asked or scales for d, _, scales, _ in cells}
        self.knob_length = {d: k for d, _, _, k in cells}
        self.lr = lr_mult * train.lr
        self.ratio = train.min_lr / train.lr
        self.base_steps = train.max_steps
        self.controls = controls
        deepest = max(d for d, _ in controls)
        short, longest = min(n for _, n in controls), max(n for _, n in controls)
        arms: list[Arm] = []
        if "control" in self.parts:
            arms += [Arm("control", "ffn_only", d, n) for d, n in controls]
        doses = [(d, s) for d, _ in controls for s in self.scales[d]]  # the knob's (depth, scale)
        if "knob" in self.parts:
            arms += [Arm("knob", "ffn_only", d, self.knob_length[d], scale=s) for d, s in doses]
        if "confirm" in self.parts:
            length = self.knob_length
            arms += [Arm("confirm", "ffn_only", d, 3 * length[d], scale=s, seeds=CONFIRM_SEEDS) for d, s in doses]
        if "confirm" in self.parts and "schedule" in self.parts:  # attn_only's constant-lr floor at 3x: does it last?
            depths = (2 * deepest, 2 * deepest + 2) if "attn" in self.parts else (2 * deepest,)
            arms += [Arm("confirm", "attn_only", d, 3 * short, seeds=CONFIRM_SEEDS) for d in depths]
        if "schedule" in self.parts:
            # with the attn part, depth 6's constant arm is one of attn_only's depths: all seeds, as the others
            constant_seeds = None if "attn" in self.parts else schedule_seeds
            arms += [
                Arm("schedule", "attn_only", 2 * deepest, short, schedule="constant", seeds=constant_seeds),
                Arm("schedule", "attn_only", 2 * deepest, short, schedule="cosine", seeds=schedule_seeds),
                Arm("schedule", "ffn_only", deepest, longest, schedule="cosine", seeds=schedule_seeds),
            ]
        if "attn" in self.parts:
            arms += [Arm("attn", "attn_only", d, short) for d in (deepest + 1, 2 * deepest + 2)]
        self.deep_depth, self.deep_length, self.dense = PRESET_DEEP.get(ctx.spec.preset, DEEP_ARMS)
        if "deep" in self.parts:
            arms += deep_arms(self.deep_depth, self.deep_length)
        arms += law_arms(ctx.spec.preset) if "law" in self.parts else []
        arms += heldout_arms(ctx.spec.preset) if "heldout" in self.parts else []
        self.arms = arms

    def steps(self, arm: Arm) -> int:
        return arm.length * self.base_steps

    def warmup_steps(self, arm: Arm) -> int | None:
        """The warm-up steps an arm sets itself (a fraction of its length), or None: the preset's."""
        return None if arm.warmup is None else max(1, round(arm.warmup * self.steps(arm)))

    def name(self, arm: Arm) -> str:
        scale = f" qk{num(arm.scale)}" if arm.scale != 1.0 else ""
        warm = "" if arm.warmup is None else num(arm.warmup)
        sched = f" warmup{warm}-cosine" if arm.schedule == "cosine" else ""
        width = "" if arm.width is None else f" d{arm.width}"
        every = "" if arm.every is None else f" eval{arm.every}"
        return f"{arm.residual} L{arm.depth}{width} {self.steps(arm)} steps{scale}{sched}{every}"

    def variant(self, arm: Arm) -> Variant:
        overrides = {
            "residual": arm.residual,
            "n_layers": arm.depth,
            "lr": self.lr,
            "min_lr": self.lr * self.ratio,
            "max_steps": self.steps(arm),
            "lr_schedule": arm.schedule,  # constant has no warm-up; cosine warms up over the preset's steps
        }
        # or over its own fraction of the arm (the deep part's)
        own = {"warmup_steps": self.warmup_steps(arm), "d_model": arm.width, "eval_interval": arm.every}
        overrides.update((k, v) for k, v in own.items() if v is not None)
        init = functools.partial(scale_qk, arm.scale) if arm.scale != 1.0 else None
        return Variant(self.name(arm), overrides, init)

    def by_name(self) -> dict[str, Arm]:
        return {self.name(a): a for a in self.arms}

    def control_for(self, arm: Arm) -> Arm:
        return next(a for a in self.arms if a.part == "control" and a.depth == arm.depth)


def uniformity_interval(ctx: Context) -> int:
    return 2 * ctx.spec.train.eval_interval


def deep_arms(depth: int, length: int) -> list[Arm]:
    """The deep part's arms: DEEP_RESIDUALS at every seed, then each attn_only arm at 3x with CONFIRM_SEEDS."""
    warm = deep_warmup_fraction()
    arms = [Arm("deep", "attn_only", depth, length, schedule="cosine", warmup=warm)]
    arms += [Arm("deep", r, depth, length) for r in DEEP_RESIDUALS]
    arms += [
        Arm("deep", "attn_only", depth, 3 * length, schedule=a.schedule, warmup=a.warmup, seeds=CONFIRM_SEEDS)
        for a in arms[:2]
    ]
    return arms


def arm_groups(ctx: Context, arms: Arms, chosen: list[Arm]) -> list[Group]:
    """The arms as groups: one per seed count; the deep part's apart, its gradient probe dense from step 0."""
    plain = uniformity_callbacks(ctx)

    def deep_callbacks(variant, seed):  # the default probes (Group.probes False) with the dense gradient probe
        from probes import default_callbacks

        train = ctx.spec.train
        return (default_callbacks(train, dense_until=arms.dense) if train.probes else []) + plain(variant, seed)

    groups = []
    for deep in (False, True):
        part = [a for a in chosen if (a.part == "deep") == deep]
        for n in sorted({a.seeds for a in part}, key=lambda n: -1 if n is None else n):
            variants = [arms.variant(a) for a in part if a.seeds == n]
            seeds = None if n is None else sorted(ctx.seeds)[:n]
            callbacks = deep_callbacks if deep else plain
            groups.append(Group(ctx.spec, variants, callbacks=callbacks, probes=not deep, seeds=seeds))
    return groups


def uniformity_callbacks(ctx: Context):
    """A group's callbacks(variant, seed): the uniformity probe every uniformity_interval, as every floor arm has."""
    every = uniformity_interval(ctx)

    def callbacks(variant, seed):
        from probes.uniformity import UniformityProbe  # probes load the model and TransformerLens: not for --help

        return [UniformityProbe(every)]

    return callbacks
