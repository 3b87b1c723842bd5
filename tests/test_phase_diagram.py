"""The phase diagram: a smoke-size grid end to end (results.json, confirmation runs, reuse, option checks,
report), and its rules on synthetic cells - axes, neighbours, places, boundary sentences and the
early-training predictor's held-out test - branch by branch."""

import json
import math

import pytest
from conftest import data_root
from offline import external_references

from experiments.phase_diagram import run as phase_diagram
from experiments.phase_diagram.boundary import (
    FLOOR,
    SPLIT,
    View,
    boundary_cells,
    cell_place,
    claim_cells,
    collapsed_text,
    confirmation_text,
    range_text,
)
from experiments.phase_diagram.boundary import sentence as boundary_sentence
from experiments.phase_diagram.boundary import views as slice_views
from experiments.phase_diagram.collapse_predictor import EARLY_FEATURES, evaluate, features, verdict_text
from experiments.phase_diagram.grid import (
    Cell,
    Slice,
    default_slices,
    grid_cells,
    neighbours,
    parse_axes,
    parse_references,
    reference_cells,
)
from experiments.statistics.held_out import (
    auc,
    binomial_interval,
    bootstrap_auc,
    fit_threshold,
    leave_one_out,
    random_splits,
)
from interp.errors import ToolkitError
from training.run_config import slug

main = phase_diagram.EXPERIMENT.main
# Two cells along lr at depth 1 (at smoke size lr 1e-3 stays on the floor, 1e-2 leaves it), full as reference.
SHAPE = ["--preset", "smoke", "--set", "n_layers=1", "--references", "full", "--early-step", "10", "--no-progress"]
ARGS = [*SHAPE, "--axes", "lr=1e-3,1e-2"]


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("phase")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))
        assert main([*ARGS, "--confirm", "--out", str(out)]) == 0
        yield out


def results_of(out):
    return json.loads((out / "smoke" / "results-phase_diagram.json").read_text())


def test_results_schema_and_places(grid_run):
    r = results_of(grid_run)
    assert r["schema"] == "phase-diagram/1" and r["confirm"] is True and r["early_step"] == 10
    assert [c["name"] for c in r["cells"]] == [
        "ffn_only L1 d32 lr0.001 sb0",
        "ffn_only L1 d32 lr0.01 sb0",
        "full L1 d32 lr0.003 sb0",
    ]
    for c in r["cells"]:
        assert c["place"] in (
            FLOOR,
            SPLIT,
            "at the bigram level",
            "between bigram and floor",
            "near full",
            "below bigram (uses context)",
        )
        levels = r["reference_levels"]
        rel = (c["final_val_loss"]["mean"] - levels["bigram"]) / (levels["unigram"] - levels["bigram"])
        assert math.isclose(c["relative_loss"], rel)
        assert isinstance(c["provisional"], bool) and c["boundary"] in (True, False)
    assert [c["role"] for c in r["cells"]] == ["grid", "grid", "reference"]
    assert len(r["views"]) == 1 and r["boundary"] == [r["views"][0]["sentence"]]
    assert r["boundary"][0].startswith("ffn_only collapses ")
    assert set(r["predictor"]) == set(EARLY_FEATURES)
    cost = r["estimate"]  # the whole grid's cost, though every run had finished when it was written
    assert cost["flops"] > 0 and math.isclose(cost["seconds_at_200_gflops"], cost["flops"] / 200e9)
    feats = r["runs"][0]["features"]
    assert feats["grad0"] > 0 and 0 <= feats["identity_early"] <= 1 and 0 <= feats["identity_end"] <= 1
    assert feats["alpha_early"] is not None and feats["growth_early"] > 0


def test_the_predictor_is_tested_against_the_final_places_too(grid_run):
    r = results_of(grid_run)
    final = r["predictor_final"]
    assert set(final) == set(EARLY_FEATURES)
    # its runs: the first-pass runs of grid cells whose final place is not seed-split; collapsed = floor there
    grid = [c for c in r["cells"] if c["role"] == "grid"]
    kept = [c for c in grid if c["final_place"] != SPLIT]
    assert all(item["n"] <= sum(len(c["seeds"]) for c in kept) for item in final.values())
    assert all(
        item["n_collapsed"] <= sum(len(c["seeds"]) for c in kept if c["final_place"] == FLOOR)
        for item in final.values()
    )
    with_all = [item for item in final.values() if item["n"] == sum(len(c["seeds"]) for c in kept)]
    assert with_all, final  # grad0 is recorded for every run
    assert all(
        item["n_collapsed"] == sum(len(c["seeds"]) for c in kept if c["final_place"] == FLOOR) for item in with_all
    )


def test_console_prints_each_slice_as_a_grid_of_places(grid_run):
    from experiments.phase_diagram.report import cell_label, summary

    r = results_of(grid_run)
    text = summary(r)
    lines = [x for x in text[text.index("places by slice") : text.index("provisional cells")].splitlines() if x.strip()]
    # one axis here (lr): a header with a column per lr, then one row holding each grid cell's label
    assert lines[2].split() == ["lr", "0.001", "0.01"]
    row = lines[-1]
    labels = [cell_label(c) for c in r["cells"] if c["role"] == "grid"]
    assert row.index(labels[0]) < row.rindex(labels[1])


def test_grid_text_rows_columns_and_missing_cells():
    from experiments.phase_diagram.report import grid_text

    view = {
        "title": "ffn_only: lr x depth",
        "residual": "ffn_only",
        "x": "n_layers",
        "xs": [1, 2],
        "y": "lr",
        "ys": [1e-3, 2e-3],
        "fixed": {"d_model": 64, "self_bias": 0.0},
    }

    def cell(n, lr, place, confirm=None):
        coords = {"residual": "ffn_only", "n_layers": n, "lr": lr, "d_model": 64, "self_bias": 0.0}
        return tuple(sorted(coords.items())), {"place": place, "provisional": False, "confirm": confirm}

    cells = dict(
        [
            cell(1, 1e-3, "at the bigram level"),
            cell(2, 1e-3, FLOOR, {"place": SPLIT, "provisional": True}),
            cell(1, 2e-3, FLOOR),
        ]
    )
    rows = grid_text(view, cells).splitlines()
    assert rows[0] == "ffn_only: lr x depth" and rows[1].split() == ["lr", "\\", "depth", "1", "2"]
    assert rows[3].split() == ["0.001", "bigram", "floor", "->", "split?"]
    assert rows[4].split() == ["0.002", "floor", "not", "run"]


def test_boundary_cells_are_confirmed_with_three_seeds_at_three_times_the_steps(grid_run):
    r = results_of(grid_run)
    for c in r["cells"]:
        if c["boundary"]:
            assert c["confirm"]["seeds"] == [1337, 1338, 1339] and c["confirm"]["steps"] == 120
            for seed in (1337, 1338, 1339):
                final = json.loads(
                    (grid_run / "smoke" / slug(c["confirm"]["name"]) / f"seed{seed}" / "final.json").read_text()
                )
                assert final["steps"] == 120
            assert c["final_place"] == c["confirm"]["place"]
        else:
            assert c["confirm"] is None and c["final_place"] == c["place"]
    if any(c["boundary"] for c in r["cells"]):
        assert "confirmed with 3 seeds at 3x the steps" in r["boundary"][0]


def test_finished_cells_are_never_retrained_and_new_values_grow_the_grid(grid_run, tmp_path, capsys):
    import shutil

    out = tmp_path / "grow"
    shutil.copytree(grid_run, out)
    finals = sorted((out / "smoke").glob("*/seed*/final.json"))
    stamps = {p: p.stat().st_mtime_ns for p in finals}
    argv = [a if a != "lr=1e-3,1e-2" else "lr=1e-3,3e-3,1e-2" for a in ARGS]
    assert main([*argv, "--no-report", "--out", str(out)]) == 0
    assert "4 runs" in capsys.readouterr().out
    assert all(p.stat().st_mtime_ns == stamps[p] for p in finals)
    assert (out / "smoke" / "ffn_only_L1_d32_lr0.003_sb0" / "seed1337" / "final.json").is_file()
    r = results_of(out)
    assert r["boundary"][0].endswith("unconfirmed)")
    assert r["predictor_final"] is None  # no confirmation ran: no final places to test against


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--axes", "depth=1,2"], "unknown axis 'depth'"),
        (["--axes", "lr=1e-3,0.001"], "--axes lr repeats 0.001"),
        (["--axes", "lr=1e-3", "--axes", "lr=2e-3"], "--axes lr is given twice"),
        (["--axes", "n_layers=1,,2"], "has an empty entry"),
        (["--axes", "n_layers=1.5"], "is not an integer"),
        (["--axes", "lr=-1"], "must be finite and > 0"),
        (["--axes", "residual=both"], "is not a residual"),
        (["--axes", "lr"], "expects NAME=V1,V2"),
        (["--references", "full,full"], "names a residual twice"),
        (["--set", "residual=full"], "--axes residual="),
        (["--early-step", "15"], "must be an evaluation step"),
        (["--margin", "0"], "--margin must be"),
    ],
)
def test_bad_options_are_one_error_line(argv, message, grid_run, capsys):
    results = grid_run / "smoke" / "results-phase_diagram.json"
    before = results.read_bytes()
    assert main([*(SHAPE if "--axes" in argv else ARGS), "--out", str(grid_run), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert results.read_bytes() == before


def test_report_is_self_contained_with_a_heatmap_per_view(grid_run):
    page = (grid_run / "smoke" / "report-phase_diagram.html").read_text()
    assert external_references(page) == [] and "Plotly" in page  # nothing fetched from the network
    assert page.count("<h2>ffn_only: lr (") == 1 and "Early-training predictor" in page


def test_help_explains_the_grid(capsys):
    assert main(["--help"]) == 0  # the help is printed inside the output guard (interp.command.cli.guarded_output)
    text = capsys.readouterr().out
    assert "--axes" in text and "--confirm" in text and "results.json schema" not in text


# ----- the grid ---------------------------------------------------------------------------------------


BASE = Cell("ffn_only", 2, 2e-3, 64, 0.0)


def test_axes_parse_sorted_and_checked():
    axes = parse_axes(["n_layers=3,1,2", "lr=2e-3,1e-3", "residual=ffn_only,full", "self_bias=-1,4"])
    assert axes == {
        "n_layers": (1, 2, 3),
        "lr": (1e-3, 2e-3),
        "residual": ("ffn_only", "full"),
        "self_bias": (-1.0, 4.0),
    }
    with pytest.raises(ToolkitError, match="must be finite"):
        parse_axes(["self_bias=inf"])
    assert parse_references("") == () and parse_references("full, attn_only") == ("full", "attn_only")
    with pytest.raises(ToolkitError, match="choose residuals"):
        parse_references("full,bogus")


def test_default_grid_is_48_cells_with_references_at_every_depth_and_width():
    cells = grid_cells(default_slices(BASE))
    refs = reference_cells(cells, BASE, ("full", "attn_only"))
    assert len(cells) == 36 and len(refs) == 12 and len(set(cells + refs)) == 48
    assert all(c.residual == "ffn_only" for c in cells)
    assert Cell("ffn_only", 4, 2e-3, 128, 0.0) in cells and Cell("full", 4, 2e-3, 128, 0.0) in refs
    assert {(c.n_layers, c.d_model) for c in refs} == {(1, 64), (2, 64), (3, 64), (4, 64), (6, 64), (4, 128)}


def test_overrides_move_min_lr_with_lr():
    assert Cell("ffn_only", 2, 1e-3, 64, 0.0).overrides(0.1)["min_lr"] == pytest.approx(1e-4)


def at(place, provisional=False, heading=None):
    """A place as cell_place gives it; a split here has one seed on the floor and one off it."""
    seeds = [FLOOR, "between bigram and floor"] if place == SPLIT else [place]
    return {"place": place, "seed_places": seeds, "provisional": provisional, "heading": heading}


def test_neighbours_and_boundary_along_each_axis():
    s = Slice(BASE, (("n_layers", (1, 2, 3)), ("lr", (1e-3, 2e-3))))
    cells = s.cells()
    assert len(neighbours(cells)) == 2 * 2 + 3 * 1  # along depth: 2 per lr; along lr: 1 per depth
    places = {c: at(FLOOR if c.n_layers >= 2 else "between") for c in cells}
    assert set(boundary_cells(places, cells)) == {c for c in cells if c.n_layers in (1, 2)}
    assert boundary_cells({c: at(FLOOR) for c in cells}, cells) == []
    # a cell without a place (not run) is left out: the cells either side of it become neighbours
    del places[Cell("ffn_only", 2, 1e-3, 64, 0.0)]
    found = boundary_cells(places, cells)
    assert Cell("ffn_only", 2, 1e-3, 64, 0.0) not in found and Cell("ffn_only", 3, 1e-3, 64, 0.0) in found


def test_the_boundary_is_the_collapse_boundary_only():
    cells = Slice(BASE, (("n_layers", (1, 2, 3)),)).cells()
    one, two, three = cells
    # off the floor, bigram beside context moves no sentence: nothing to confirm
    assert (
        boundary_cells(
            {
                one: at("at the bigram level"),
                two: at("below bigram (uses context)"),
                three: at("between bigram and floor"),
            },
            cells,
        )
        == []
    )
    # a seed-split cell is its own side: it and its neighbours are at the boundary
    assert boundary_cells({one: at("between bigram and floor"), two: at(SPLIT), three: at(SPLIT)}, cells) == [one, two]
    # a projection onto or off the floor makes a cell a boundary cell even among neighbours like it
    off = {c: at("between bigram and floor") for c in cells}
    off[three] = at("between bigram and floor", True, FLOOR)
    assert boundary_cells(off, cells) == [three]
    on = {c: at(FLOOR) for c in cells}
    on[one] = at(FLOOR, True, "between bigram and floor")
    assert boundary_cells(on, cells) == [one]
    # a projection that stays on its side (between heading to bigram) is not
    off[three] = at("between bigram and floor", True, "at the bigram level")
    assert boundary_cells(off, cells) == []


def test_a_split_among_places_off_the_floor_is_off_the_floor():
    """Seeds at between and context say nothing about where the collapse holds: such a cell is off the
    floor for the boundary and the sentence; one floor seed among them makes it seed-split."""
    cells = Slice(BASE, (("n_layers", (1, 2, 3, 4, 6)),)).cells()
    one, two, three, four, six = cells
    between, context = "between bigram and floor", "below bigram (uses context)"
    off_split = {"place": SPLIT, "seed_places": [between, context], "provisional": False, "heading": None}
    places = {one: at(between), two: off_split, three: at(between), four: at(FLOOR), six: at(FLOOR)}
    assert boundary_cells(places, cells) == [three, four]
    on_split = {**off_split, "seed_places": [FLOOR, between]}
    assert boundary_cells({**places, two: on_split}, cells) == [one, two, three, four]
    view = slice_views(Slice(BASE, (("n_layers", (1, 2, 3, 4, 6)),)))[0]
    floors = {c: at(FLOOR) for c in cells}
    plain = boundary_sentence(view, {**floors, three: at(between)}, None)
    split = boundary_sentence(view, {**floors, three: off_split}, None)
    assert plain.split(" (")[0] == split.split(" (")[0] == "ffn_only collapses at depth 1, 2, 4, 6 only"
    assert "seed-split at depth 3" in split  # still said, in the notes
    floor_split = boundary_sentence(view, {**floors, three: on_split}, None)
    assert floor_split.startswith("ffn_only collapses at every depth tried except depth 3 (seed-split)")


def test_every_floor_cell_is_confirmed_not_only_the_edge():
    # depth 4 and 6 both on the floor, depth 1 off it: only depth 1 and 4 are the edge, but the sentence
    # "collapses at depth >= 4" claims depth 6 as well (and at 3x such a cell can leave the floor)
    cells = Slice(BASE, (("n_layers", (1, 4, 6)),)).cells()
    one, four, six = cells
    places = {one: at("between bigram and floor"), four: at(FLOOR), six: at(FLOOR)}
    assert boundary_cells(places, cells) == [one, four]
    assert claim_cells(places, cells) == [one, four, six]
    # off the floor everywhere: nothing is claimed to collapse, nothing to confirm
    assert claim_cells({c: at("at the bigram level") for c in cells}, cells) == []
    # a seed-split cell is not on the floor, but beside it it is at the edge
    assert claim_cells({one: at("at the bigram level"), four: at(FLOOR), six: at(SPLIT)}, cells) == cells


def test_plan_confirms_an_interior_floor_cell(monkeypatch):
    """The frame plans the confirmation from the finished places: with depth 1 off the floor and depths
    4 and 6 on it, depth 6 (not beside the edge) is confirmed too."""
    from types import SimpleNamespace

    grid = SimpleNamespace(cells=Slice(BASE, (("n_layers", (1, 4, 6)),)).cells())
    one, four, six = grid.cells
    first = {one: at("between bigram and floor"), four: at(FLOOR), six: at(FLOOR)}
    assert phase_diagram.confirm_cells(grid, first, {}) == [one, four, six]
    # once depth 6 is confirmed seed-split, it is still confirmed (kept) and depth 4 stays at the edge
    assert phase_diagram.confirm_cells(grid, first, {six: at(SPLIT)}) == [one, four, six]


# ----- places and sentences ---------------------------------------------------------------------------

LEVELS = {"unigram": 3.3, "bigram": 2.5}


def test_cell_place_per_seed_never_averaged():
    one = cell_place([3.29], [3.29], LEVELS, None, 0.05)
    assert one == {"place": FLOOR, "seed_places": [FLOOR], "provisional": False, "heading": None}
    split = cell_place([3.29, 2.9], [3.29, 2.9], LEVELS, None, 0.05)
    assert split["place"] == SPLIT and split["seed_places"] == [FLOOR, "between bigram and floor"]
    moving = cell_place([3.29], [3.0], LEVELS, None, 0.05)
    assert moving["provisional"] and moving["heading"] == "between bigram and floor"
    assert cell_place([2.0], [2.0], LEVELS, 2.02, 0.05)["place"] == "near full"


@pytest.mark.parametrize(
    "collapsed, expected",
    [
        (set(), "at no depth tried"),
        ({1, 2, 4}, "at every depth tried"),
        ({2, 4}, "at depth >= 2"),
        ({1, 2}, "at depth <= 2"),
        ({1, 4}, "at depth 1, 4 only"),
    ],
)
def test_collapsed_text(collapsed, expected):
    assert collapsed_text("n_layers", [1, 2, 4], collapsed) == expected
    assert "no cell has a place" in collapsed_text("n_layers", [], set())


def test_collapsed_text_names_a_split_value_inside_the_range():
    # depth 1, 2 off the floor, 4 on it, 6 seed-split: "depth >= 4" alone would claim depth 6
    assert collapsed_text("n_layers", [1, 2, 4], {4}, [6]) == "at depth >= 4 except depth 6 (seed-split)"
    assert collapsed_text("n_layers", [1, 2, 4], {1, 2, 4}, [6]) == "at every depth tried except depth 6 (seed-split)"
    assert collapsed_text("n_layers", [2, 4], {2}, [1, 3]) == "at depth <= 2 except depth 1 (seed-split)"
    # a split value outside the range is only in the sentence's notes (the first: every value is in range)
    assert collapsed_text("n_layers", [4, 6], {4, 6}, [1]) == "at every depth tried except depth 1 (seed-split)"
    assert collapsed_text("n_layers", [2, 4, 6], {4, 6}, [1]) == "at depth >= 4"
    assert collapsed_text("n_layers", [4, 6], {4, 6}, 1) == "at every other depth tried"


@pytest.mark.parametrize(
    "group, expected",
    [
        ([1, 2, 3, 4], "at every lr tried"),
        ([2], "at lr 2"),
        ([1, 2], "for lr <= 2"),
        ([3, 4], "for lr >= 3"),
        ([2, 3], "for 2 <= lr <= 3"),
    ],
)
def test_range_text(group, expected):
    assert range_text("lr", group, [1, 2, 3, 4]) == expected


def places_for(view, rule, provisional=()):
    out = {}
    for yv in view.ys:
        for xv in view.xs:
            c = view.cell(xv, yv)
            p = rule(xv, yv)
            if p is not None:
                out[c] = {"place": p, "provisional": c in provisional, "heading": "between bigram and floor"}
    return out


def test_sentence_two_axes_groups_rows_into_ranges():
    view = slice_views(Slice(BASE, (("n_layers", (1, 2, 3, 6)), ("lr", (5e-4, 1e-3, 2e-3, 4e-3)))))[0]

    def rule(n, lr):  # deep collapses at small lr; everything collapses at 2e-3; nothing at 4e-3
        if lr == 4e-3:
            return "between bigram and floor"
        return FLOOR if lr == 2e-3 or n >= 3 else "between bigram and floor"

    text = boundary_sentence(view, places_for(view, rule), None)
    assert text == (
        "ffn_only collapses at depth >= 3 for lr <= 0.001; at every depth tried at lr 0.002; "
        "at no depth tried at lr 0.004 (width 64, self_bias 0; unconfirmed)"
    )


def test_sentence_marks_split_provisional_and_confirmation():
    view = slice_views(Slice(BASE, (("n_layers", (1, 2, 3)),)))[0]
    split_cell, moving = view.cell(2), view.cell(3)
    places = places_for(view, lambda n, _: {1: "between bigram and floor", 2: SPLIT, 3: FLOOR}[n], {moving})
    text = boundary_sentence(view, places, {split_cell: True, moving: False})
    assert text.startswith("ffn_only collapses at depth >= 3 (")  # the split cell is left out of the rule
    assert "seed-split at depth 2" in text and "provisional at depth 3 (heading to between)" in text
    assert "1 of 2 floor and boundary cells confirmed, the rest unconfirmed" in text


def test_sentence_one_cell_and_residual_axis():
    [one] = slice_views(Slice(BASE, ()))
    assert boundary_sentence(one, {one.cell(): {"place": FLOOR, "provisional": False}}, None).startswith(
        "ffn_only sits at the unigram floor"
    )
    assert "not run" in boundary_sentence(one, {}, None)
    two = slice_views(Slice(BASE, (("residual", ("ffn_only", "full")), ("lr", (1e-3, 2e-3)))))
    assert [v.residual for v in two] == ["ffn_only", "full"] and all(v.x == "lr" and v.y is None for v in two)


def test_views_of_three_axes_fix_the_third():
    vs = slice_views(Slice(BASE, (("n_layers", (1, 2)), ("lr", (1e-3,)), ("d_model", (32, 64)))))
    assert len(vs) == 2 and [dict(v.fixed)["d_model"] for v in vs] == [32, 64]
    assert isinstance(vs[0], View) and vs[0].title().startswith("ffn_only: lr x depth (width 32")


def test_confirmation_text_branches():
    a, b = Cell("ffn_only", 1, 1e-3, 64, 0.0), Cell("ffn_only", 2, 1e-3, 64, 0.0)
    assert confirmation_text([a, b], None) == "unconfirmed"
    assert confirmation_text([a, b], {}) == "no floor or boundary cell to confirm"
    assert confirmation_text([a, b], {a: True, b: True}).startswith("its 2 floor and boundary cells confirmed")
    assert confirmation_text([a, b], {a: True}).startswith("its 1 floor and boundary cell confirmed")


# ----- the predictor ----------------------------------------------------------------------------------


def test_threshold_fit_and_leave_one_out():
    xs, ys = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [False, False, False, True, True, True]
    assert fit_threshold(xs, ys) == (3.5, True)
    assert fit_threshold(xs, [not y for y in ys]) == (3.5, False)
    # held out, 4.0 falls exactly on the cut fitted without it (3 and 5: 4.0) and counts as below: 5 of 6 right
    assert leave_one_out(xs, ys) == 5
    assert random_splits(xs, ys, n=5) and all(0 <= a <= 1 for a in random_splits(xs, ys, n=5))


def test_auc_and_intervals():
    assert auc([1, 2, 3, 4], [False, False, True, True]) == 1.0
    assert auc([1, 2, 3, 4], [True, True, False, False]) == 0.0
    assert auc([1, 1, 1, 1], [True, False, True, False]) == 0.5
    lo, hi = bootstrap_auc([1, 2, 3, 4, 5, 6], [False, False, False, True, True, True], n=200)
    assert lo == hi == 1.0
    lo, hi = binomial_interval(7, 10)  # Clopper-Pearson 95%: [0.348, 0.933]
    assert lo == pytest.approx(0.3475, abs=1e-3) and hi == pytest.approx(0.9333, abs=1e-3)
    assert binomial_interval(0, 10)[0] == 0.0 and binomial_interval(10, 10)[1] == 1.0


def sample(x, collapsed):
    return {"features": {"grad0": x, "grad_warm": None}, "collapsed": collapsed}


def test_evaluate_says_what_predicts_and_what_cannot_be_tested():
    separable = [sample(x, x > 10) for x in range(20)]
    out = evaluate(separable, ("grad0", "grad_warm"))
    assert out["grad0"]["predicts"] and out["grad0"]["loo_accuracy"] == 19 / 20  # one held-out run on the cut
    assert out["grad_warm"] == {
        "n": 0,
        "n_collapsed": 0,
        "untestable": "0 run(s) with this feature; at least 4 are needed",
    }
    assert "PREDICTS" in verdict_text("grad0", out["grad0"])
    noise = [sample(x, x % 2 == 0) for x in range(12)]  # alternating: no threshold separates it
    item = evaluate(noise, ("grad0",))["grad0"]
    assert item["majority_accuracy"] == 0.5 and not item["predicts"]
    assert "does not predict" in verdict_text("grad0", item)
    same = evaluate([sample(x, True) for x in range(6)], ("grad0",))["grad0"]
    assert "every run is collapsed" in same["untestable"] and "not testable" in verdict_text("grad0", same)


def test_an_auc_below_half_is_written_in_the_direction_it_separates():
    """Issue 46: "AUC 0.06 [0.01, 0.15]" beside "predicts" reads as no prediction where it is a strong one the
    other way. The line says which side collapses; the stored AUC stays Mann-Whitney's."""
    lower_collapse = [sample(x, x < 10) for x in range(20)]
    item = evaluate(lower_collapse, ("grad0",))["grad0"]
    assert item["auc"] == 0.0 and item["predicts"]
    line = verdict_text("grad0", item)
    assert "AUC 1.00 [1.00, 1.00], lower values collapse" in line and "AUC 0.00" not in line
    higher = verdict_text("grad0", evaluate([sample(x, x > 9) for x in range(20)], ("grad0",))["grad0"])
    assert "AUC 1.00 [1.00, 1.00], higher values collapse" in higher
    item = {**item, "auc": 0.06, "auc_interval": [0.01, 0.15]}  # the page's grad_warm, as now written
    assert "AUC 0.94 [0.85, 0.99], lower values collapse" in verdict_text("grad_warm", item)


def test_features_from_probe_records():
    probes = {
        "gradients": [{"step": s, "attn": [3.0 * (s + 1)], "mlp": [4.0 * (s + 1)]} for s in (0, 10, 20, 30)],
        "attention": [{"step": s, "alpha_tt_layer_mean": [0.1 * (s // 25 + 1)]} for s in (0, 25, 50, 75, 100, 125)],
        "norms": [{"step": s, "growth": 1.0 + s / 100} for s in (0, 50, 100, 150)],
        "identity": [{"step": 100, "accuracy": [[0.4]]}, {"step": 200, "accuracy": [[0.9]]}],
    }
    f = features(probes, warmup=25, early=100)
    assert f["grad0"] == 5.0 and f["grad_warm"] == pytest.approx(math.hypot(63, 84))  # step 20: the last <= 25
    assert f["alpha_early"] == pytest.approx(0.3) and f["identity_early"] == 0.4 and f["identity_end"] == 0.9
    assert f["growth_early"] == 2.0 and f["growth_end"] == 2.5
    assert set(features({}, 25, 100).values()) == {None}


@pytest.mark.slow
def test_slurm_local_plans_the_confirmation_round_in_its_jobs_and_equals_local(grid_run, tmp_path, shared_data):
    out = tmp_path / "slurm"
    assert main([*ARGS, "--confirm", "--no-report", "--out", str(out), "--launcher", "slurm-local"]) == 0
    local, cluster = results_of(grid_run), results_of(out)
    assert any(c["confirm"] for c in cluster["cells"])  # the jobs of the second round found their runs in the plan
    assert [(c["name"], c["final_val_loss"], c["confirm"]) for c in cluster["cells"]] == [
        (c["name"], c["final_val_loss"], c["confirm"]) for c in local["cells"]
    ]
    assert cluster["boundary"] == local["boundary"]


def test_a_seed_split_value_is_not_counted_as_no_collapse():
    assert collapsed_text("n_layers", [1], set(), split=1) == "at no other depth tried"
    assert collapsed_text("n_layers", [1, 2], {1, 2}, split=1) == "at every other depth tried"


def test_a_confirmation_run_is_never_near_a_full_a_third_as_long():
    from experiments.phase_diagram.grid import Cell
    from experiments.phase_diagram.run import places_of

    levels = {"unigram": 3.3, "bigram": 2.5}
    subject, full = Cell("ffn_only", 2, 2e-3, 64, 0.0), Cell("full", 2, 2e-3, 64, 0.0)
    run = {"final_val_loss": 2.30, "tail": {"projected": 2.30}}
    runs = {subject.name: [run], full.name: [{**run, "final_val_loss": 2.31}], subject.name + " x3": [run]}
    assert places_of(runs, [subject, full], levels, 0.05)[subject]["place"] == "near full"
    assert places_of(runs, [subject, full], levels, 0.05, " x3")[subject]["place"] == "below bigram (uses context)"


# ----- audit 23c: values the names could not tell apart, and options refused before any work -----------


def test_values_that_print_alike_are_two_cells_with_two_directories():
    a, b = Cell("ffn_only", 2, 1e-3, 64, 0.0), Cell("ffn_only", 2, 0.0010000001, 64, 1.0000001)
    assert a.name == "ffn_only L2 d64 lr0.001 sb0"  # the names finished runs already have
    assert b.name == "ffn_only L2 d64 lr0.0010000001 sb1.0000001"
    assert slug(a.name) != slug(b.name)


def test_variants_sharing_a_run_directory_are_refused_before_any_work():
    from experiments.runner.frame import check_distinct_dirs
    from experiments.shared.plan import Group, Job, Variant
    from training.presets import resolve

    group = Group(resolve("smoke", {}), [Variant("attn_only + uniform", {}), Variant("attn_only uniform", {})])
    jobs = [Job(group, v, 1) for v in group.variants]
    with pytest.raises(ToolkitError, match="would share the run directory attn_only_uniform"):
        check_distinct_dirs(jobs)
    check_distinct_dirs(jobs[:1] * 2)  # one variant's seeds share nothing


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--axes", "lr=0.001,0.0010000001", "--collect"], "not finished yet"),  # two cells, both named
        (["--axes", "lr=1e-3", "--set", "self_bias=inf"], "need a finite self_bias"),
        (["--axes", "lr=1e-3", "--set", "self_bias=-inf"], "need a finite self_bias"),
        (["--axes", "lr=1e-3", "--set", "seed=5", "--seeds", "1"], "--set seed=... and --seeds"),
        (["--axes", "lr=1e-3", "--seeds", str(2**63 - 1), "--confirm"], "--confirm trains seeds"),
    ],
)
def test_refused_with_one_line_before_any_work(extra, match, tmp_path, capsys, shared_data):
    out = tmp_path / "out"
    assert main([*SHAPE, *extra, "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and match in err[0], err
    assert not list(out.glob("*/*/seed*/final.json"))
    if "--collect" in extra:
        assert err[0].count("lr0.0010000001") == 1 and err[0].count("lr0.001 ") == 1


def test_a_view_whose_cells_are_all_seed_split_says_so():
    split = collapsed_text("n_layers", [], set(), split=2)
    assert split == "nowhere known along depth (every cell tried is seed-split)"
    assert collapsed_text("n_layers", [], set()) == "nowhere known along depth (no cell has a place)"


def test_a_confirmation_that_moves_the_boundary_puts_its_new_neighbours_up_for_confirmation():
    from types import SimpleNamespace

    from experiments.phase_diagram.run import confirm_cells

    cells = Slice(BASE, (("n_layers", (1, 2, 3, 4)),)).cells()
    one, two, three, four = cells
    grid = SimpleNamespace(cells=cells)
    first = {one: at("at the bigram level"), two: at("between bigram and floor"), three: at(FLOOR), four: at(FLOOR)}
    assert confirm_cells(grid, first, {}) == [two, three, four]  # the first round: the floor and its edge
    # depth 2 reaches the floor at 3x: depth 1 is now beside the boundary, and the confirmed stay listed
    round1 = {two: at(FLOOR), three: at(FLOOR), four: at(FLOOR)}
    assert confirm_cells(grid, first, round1) == cells
    # depth 1 stays off it: the boundary stands on confirmed cells, nothing new to confirm
    assert confirm_cells(grid, first, {**round1, one: at("at the bigram level")}) == cells
    # depth 3 leaves the floor at 3x: the edge moves to depth 3-4, all confirmed; depth 1 is not beside it
    left = {two: at("between bigram and floor"), three: at("between bigram and floor"), four: at(FLOOR)}
    assert confirm_cells(grid, first, left) == [two, three, four]
    # depth 2 seed-split instead: a split beside bigram is an edge, so depth 1 is confirmed next
    assert confirm_cells(grid, first, {**left, two: at(SPLIT)}) == cells


def test_default_early_step_follows_the_presets_evaluation_steps():
    from experiments.phase_diagram.run import default_early_step
    from training.presets import TrainConfig

    assert default_early_step(TrainConfig(max_steps=600, eval_interval=25, eval_from=0.0)) == 100
    assert default_early_step(TrainConfig(max_steps=40, eval_interval=10, eval_from=0.0)) == 30  # smoke
    # no evaluation at or before step 100: the first one
    assert default_early_step(TrainConfig(max_steps=900, eval_interval=100, eval_from=0.5)) == 500
    from interp.errors import ToolkitError

    with pytest.raises(ToolkitError, match="has none"):
        default_early_step(TrainConfig(max_steps=40, eval_interval=100, eval_from=0.0))
