"""experiments package."""

from interp.command.signals import guard_startup

guard_startup()  # a Ctrl-C while modules import: one line, not a traceback
