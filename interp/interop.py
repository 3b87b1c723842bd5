"""Other interpretability libraries on a ResidualGPT (the `[interop]` extra: nnsight, circuitsvis).

nnsight: wrap the model itself, `NNsight(model)`; every hook point is a module,
so `model.blocks[0].attn.hook_pattern.output` (and hook_z, hook_resid_*) can
be read, saved and edited inside `trace`. The wrapper replaces each module's
forward, which the attention and LayerNorm check for: hook_pattern /
hook_attn_scores / hook_scale then take their explicit paths, as under
run_with_cache, and are never skipped.

circuitsvis: `circuitsvis_patterns` below. Its HTML does not open offline: str(html),
html.show_code() and a notebook that is online load circuitsvis's JavaScript from
unpkg.com; only `html.local_src` inlines the script. The toolkit's own figures
(interp.plots, python -m interp.plot_attention) stay self-contained and offline.
"""

from __future__ import annotations

from typing import Any

from interp.errors import ConfigError


def circuitsvis_patterns(cache: Any, layer: int, tokens: list[str], batch: int = 0):
    """circuitsvis.attention.attention_patterns for one layer of a cache (ResidualGPT's or the export's).

    Returns circuitsvis's RenderedHTML. It loads its JavaScript from unpkg.com
    (str(), show_code(), notebooks when online); use `.local_src` for a page
    that works offline.
    """
    from circuitsvis.attention import attention_patterns as render

    pattern = cache["pattern", layer]
    if pattern.dim() == 4:
        pattern = pattern[batch]
    if len(tokens) != pattern.shape[-1]:
        raise ConfigError(f"{len(tokens)} token strings for a pattern over {pattern.shape[-1]} positions")
    return render(tokens=list(tokens), attention=pattern.detach().cpu())
