"""Other interpretability libraries on a ResidualGPT (the `[interop]` extra: nnsight, circuitsvis).

nnsight: wrap the model itself, `NNsight(model)`; every hook point is a module,
so `model.blocks[0].attn.hook_pattern.output` (and hook_z, hook_resid_*) can
be read, saved and edited inside `trace`. The wrapper replaces each module's
forward, which the attention and LayerNorm check for: hook_pattern /
hook_attn_scores / hook_scale then take their explicit paths, as under
run_with_cache, and are never skipped.

circuitsvis: `circuitsvis_patterns` below, offline: circuitsvis's own HTML (str(html),
html.show_code(), and a notebook that is online when it renders) loads its JavaScript from
unpkg.com, so a saved page or notebook is blank offline; this one inlines the script that
circuitsvis ships (about 1.3 MB a view) in every form. circuitsvis's functions called
directly (TransformerLens's demos: cv.attention.attention_patterns) are circuitsvis's: pass
their result to `offline_html`. The toolkit's own figures (interp.figures.plots, python -m
interp.plot_attention) embed plotly and stay offline too.
"""

from __future__ import annotations

from typing import Any

from interp.errors import ConfigError


def offline_html(rendered: Any) -> Any:
    """A circuitsvis RenderedHTML whose every form (a notebook's, str(), show_code()) is its inlined-script
    HTML (local_src): it opens with no network, at the cost of the script in each view."""
    from circuitsvis.utils.render import RenderedHTML

    if not isinstance(rendered, RenderedHTML):
        raise ConfigError(f"offline_html takes what a circuitsvis function returns, not {type(rendered).__name__}")
    return RenderedHTML(rendered.local_src, rendered.local_src)


def circuitsvis_patterns(cache: Any, layer: int, tokens: list[str], batch: int = 0):
    """circuitsvis.attention.attention_patterns for one layer of a cache (ResidualGPT's or the export's).

    Returns circuitsvis's RenderedHTML with its script inlined in every form (offline_html): a notebook, a
    saved page or str(html) shows it with no network.
    """
    from circuitsvis.attention import attention_patterns as render

    pattern = cache["pattern", layer]
    if pattern.dim() == 4:
        pattern = pattern[batch]
    if len(tokens) != pattern.shape[-1]:
        raise ConfigError(f"{len(tokens)} token strings for a pattern over {pattern.shape[-1]} positions")
    return offline_html(render(tokens=list(tokens), attention=pattern.detach().cpu()))
