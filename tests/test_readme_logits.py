"""What the user's guide (docs/guide.md, moved from the README) says the export's logits are is what they are (issue
58: it said "a HookedTransformer with the same logits", and torch.allclose(tl(x), model(x)) was False:
center_unembed shifts each position's logits)."""

from __future__ import annotations

import warnings

import pytest
import torch
from api_models import ids, tiny_model
from conftest import REPO
from majors import tl3_only

README = " ".join((REPO / "README.md").read_text().split())
GUIDE = " ".join((REPO / "docs" / "guide.md").read_text().split())
ATOL = 1e-5  # float32 logits of size ~3 through two differently ordered computations: 1e-6 apart in practice


def export(model, **kwargs):
    from interp import to_hooked_transformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the removed residual path's notice
        return to_hooked_transformer(model, **kwargs)


@tl3_only
@pytest.mark.parametrize("residual", ["full", "attn_only", "ffn_only", "none"])
def test_the_exports_log_probs_are_exact_and_its_logits_shifted_per_position(residual):
    model = tiny_model(residual=residual)
    x = ids(4, 8)
    with torch.no_grad():
        want, got = model(x), export(model)(x)
        raw = export(model, center_unembed=False)(x)
    torch.testing.assert_close(got.log_softmax(-1), want.log_softmax(-1), rtol=0, atol=ATOL)
    shift = got - want
    assert shift.abs().max() > 0.1 and not torch.allclose(got, want, atol=ATOL)  # the default's logits are not raw
    torch.testing.assert_close(shift, shift.mean(-1, keepdim=True).expand_as(shift), rtol=0, atol=ATOL)  # per position
    assert torch.allclose(raw, want, atol=ATOL)  # the README's own check, with center_unembed=False


def test_the_readme_says_what_the_exports_logits_are():
    assert "with the same logits" not in README + GUIDE
    assert "with the same log-probs (raw logits: docs/guide.md)" in README
    assert "differ by one constant per position" in GUIDE
    assert "to_hooked_transformer(model, center_unembed=False)` keeps the raw logits" in GUIDE
    assert "`torch.allclose(tl(x), model(x), atol=1e-5)` holds" in GUIDE and ATOL == 1e-5
