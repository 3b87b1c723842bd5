"""The TransformerLens major the tests run under, and its export of a ResidualGPT.

`export` is interp.load_tl: a HookedTransformer on 3.x (make test), the TL 4
TransformerBridge on 4.x (make test-tl4), so the export tests run on both.
What only a HookedTransformer has (its weight processing, its config and state
dict, save_hooked) is marked `tl3_only`; test_bridge.py holds the bridge's
counterparts.
"""

from __future__ import annotations

import warnings

import pytest

from interp.tl.load import load_tl
from interp.tl.major import TL_MAJOR

TL4 = TL_MAJOR >= 4
tl3_only = pytest.mark.skipif(TL4, reason="HookedTransformer only (TL 3.x); the bridge's counterpart: test_bridge.py")


# The 3.x export's processing off: every hook value is ResidualGPT's, which most export tests compare. The
# defaults (from_pretrained's fold_ln, center_writing_weights, center_unembed) are tested in test_hooked.py and
# the demo tests (tests/test_demo_*.py); the bridge has no processing.
RAW = {} if TL4 else {"fold_ln": False, "center_writing_weights": False, "center_unembed": False}


def export(source, **kwargs):
    """The installed major's TransformerLens model of `source`, unprocessed (RAW; tokenizer warnings silenced)."""
    kwargs = {**RAW, **kwargs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_tl(source, **kwargs)
