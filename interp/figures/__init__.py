"""Plotly figures of the toolkit's measurements (plots.py)
and the self-contained page they are saved in (plot_page.py).

    plots.py       plotly figures (attention, probes, where the token is)
    plot_page.py   save_html: figures, Tables and text in one self-contained page that fetches nothing;
                   PlotInputError; offline_notebook_renderer, the same rule in a notebook
"""
