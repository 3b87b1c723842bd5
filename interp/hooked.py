"""The old path of interp.tl.hooked (TransformerLens 3.x export), kept for notebooks that import it."""

from interp.tl.hooked import *  # noqa: F403
from interp.tl.hooked import __all__  # noqa: F401
