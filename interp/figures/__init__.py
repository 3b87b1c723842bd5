"""Plotly figures of the toolkit's measurements (plots.py)
and the self-contained page they are saved in (plot_page.py).
"""
