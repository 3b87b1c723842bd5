"""python -m interp.nanogpt: a ResidualGPT checkpoint written as a nanoGPT one (interp.nanogpt.writer)."""

import sys

from interp.nanogpt.writer import main

sys.exit(main())
