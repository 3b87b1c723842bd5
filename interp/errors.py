"""The toolkit's error hierarchy: every bad input raises a ToolkitError subclass.

Command-line entry points catch ToolkitError and print one `error:` line.
"""


class ToolkitError(Exception):
    """Base class for every error the toolkit raises on bad input."""


class ConfigError(ToolkitError, ValueError):
    """A configuration field has a value that is not allowed."""


class CheckpointError(ToolkitError):
    """A checkpoint file is missing, corrupt, unsafe or of an unknown schema."""


class DataError(ToolkitError):
    """A corpus is missing, corrupt or too short for the requested context."""
