"""The runner every experiment is written against: the frame (plan, train, analyse, report), --analyse-only,
the cost preface, and the report's text and figures.

    frame.py       Experiment and its runner (Experiment.replan plans again from finished runs)
    analyse_only.py  --analyse-only: the analysis on logged runs, no checkpoints, no training
    cost.py        a grid's training FLOPs and the minutes it takes here, for a preface
    text.py        number cells (num, fmt_number), tables, reference-level lines, runs' curves, software versions
    svg.py         figures as SVG for the result pages
"""
