"""The toolkit's error hierarchy: every bad input raises a ToolkitError subclass.

Command-line entry points catch ToolkitError and print one `error:` line.
"""

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any


class ToolkitError(Exception):
    """Base class for every error the toolkit raises on bad input."""


class ConfigError(ToolkitError, ValueError):
    """A configuration field has a value that is not allowed."""


class CheckpointError(ToolkitError):
    """A checkpoint file is missing, corrupt, unsafe or of an unknown schema."""


class DataError(ToolkitError):
    """A corpus is missing, corrupt or too short for the requested context."""


class DecompositionError(ToolkitError, ValueError):
    """A cache, site or model that cannot be decomposed (missing hook, unknown site, ...): interp.reading.decompose."""


class ToolkitWarning(UserWarning):
    """Base class for the toolkit's warnings: a call that runs but whose number may not be the one meant."""


class TrainModeWarning(ToolkitWarning):
    """Activations taken in train mode with dropout on: every read of them is off by a random amount."""


class LogitAttrsWarning(ToolkitWarning):
    """TL's logit_attrs leaves out ln_final.w (no fold_ln) or b_U: its attributions do not sum to the logit."""


class UntrainedTokenWarning(ToolkitWarning):
    """A token the model never saw in training (the export's BOS / <|endoftext|> row) was put in its input."""


class WeightsOnlyWarning(ToolkitWarning):
    """state_dict() of a rewired export: its weights alone load into a plain HookedTransformer as another model."""


class HiddenRoutingWarning(ToolkitWarning):
    """W_Q / W_K of an export whose hook_attn_scores adds a routing (self_bias, uniform) they do not show."""


def io_error_line(e: OSError) -> str:
    """The line a command prints, before exiting 2, for an OSError that no layer turned into a ToolkitError."""
    where = f" {e.filename}" if e.filename else ""
    return f"error: cannot read or write{where}: {e.strerror or e}"


def one_line(e: BaseException) -> str:
    """An error's message on one line (torch's and numpy's messages span several), control characters
    escaped: a message may quote a file's contents, and a terminal must not act on an escape code in it."""
    return escape_controls(" ".join(str(e).split("\n")).strip() or type(e).__name__)


def escape_controls(text: str, keep: str = "") -> str:
    """Text from a file as it may reach a terminal: every non-printable character but those in `keep` written
    as its Python escape (\\x1b, \\r, \\u200e), so an escape code in a vocabulary or message is shown, not obeyed."""
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def state_dict_detail(e: RuntimeError) -> str:
    """torch's load_state_dict complaint (missing / unexpected keys, shapes) on one line, without its first line,
    which only names the module class."""
    return " ".join(line.strip() for line in str(e).splitlines()[1:])


def warn(message: str, category: type[Warning], stacklevel: int = 2) -> None:
    """Warn, attributed to the line `stacklevel` frames up (as warnings.warn counts); Python's filters (the
    user's) decide how often it shows.

    The filters are never touched here: changing them at call time resets Python's record of what
    was shown, which would break a user's 'once', 'default' or 'module' filter. A line Python's warn cannot take
    (exec with a __name__ that is None or not a string: warnings.warn drops it unseen; a loader that fails when
    asked for the line's source) warns through warn_explicit at that line instead, at every call.
    """
    import warnings

    try:
        frame = sys._getframe(stacklevel)
    except ValueError:  # fewer frames than that: warnings.warn attributes it to sys
        frame = None
    if frame is not None and not frame_module(frame):
        _warn_explicit(frame, message, category)
        return
    try:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    except Warning:  # the user's 'error' filter: theirs to see
        raise
    except Exception:
        if frame is None:
            raise
        _warn_explicit(frame, message, category)


class HookNameError(ConfigError, KeyError):
    """A hook name the model lacks: a ConfigError, and still the KeyError code catching a missing key expects."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ShapeError(ConfigError):
    """A tensor handed to a public function has the wrong dims, shape, dtype or device (the argument named)."""


class NoTokenizerError(ConfigError, AssertionError):
    """Text given to an export made without a tokenizer: a ConfigError, and still the AssertionError TL raises."""


class TokenIdError(ConfigError, IndexError):
    """A token id outside the vocabulary, or ids that are not integers: a ConfigError, and still an IndexError."""


class ArgumentError(ConfigError, TypeError):
    """An argument of the wrong kind or empty (a string where ids are meant, no batches): still a TypeError."""


class HookReturnError(ToolkitError, ValueError):
    """A user hook returned a value whose shape, dtype or device differs from what it received (the hook named)."""


class ConfigEditedError(ConfigError):
    """model.cfg changed after the model was built: the weights and blocks still compute the config they were built
    with, so an export, a decomposition or a forward pass reading cfg would describe another model."""


class CacheMismatchError(DecompositionError):
    """A cache that was not taken from the model it is read with (another model, another wiring, other sizes)."""


def closest_names(name: str, names: Any, n: int = 3) -> str:
    """' (closest: a, b)' for the names most like `name`, or '' when none is close (difflib)."""
    import difflib

    close = difflib.get_close_matches(str(name), list(names), n=n, cutoff=0.6)
    return f" (closest: {', '.join(close)})" if close else ""


class HookNames(dict):
    """TransformerLens's name -> module map, whose missing name (a hook at layer 9 of a 2-layer model, a typo) is a
    ConfigError naming the model's layers and the closest names, not a bare KeyError from inside run_with_hooks."""

    def __init__(self, modules: dict, n_layers: int):
        super().__init__(modules)
        self.n_layers = n_layers

    def __missing__(self, name: str):
        raise HookNameError(
            f"this model has no hook point or module named {name!r}{closest_names(name, self)} "
            f"(layers 0..{self.n_layers - 1}; model.hook_dict lists every hook point)"
        )


def refuse_if_not_additive(method: str, residual: str, use: str) -> None:
    """TransformerLens's additive cache methods (decompose_resid, ...) on a wiring whose stream is not the sum of
    the embeddings and every sublayer output: refused by name, pointing to `use`."""
    if residual != "full":
        raise ToolkitError(
            f"ActivationCache.{method} assumes the residual stream is the sum of the embeddings and every "
            f"sublayer output, which is false for residual={residual!r}; use {use}"
        )


class ProcessedWeightsWarning(ToolkitWarning):
    """A probe read a TransformerLens model whose weight processing changed what it measures."""


class UnembedBiasWarning(ToolkitWarning):
    """A stack or residual direction dotted with W_U on a model whose logits also add b_U (fold_ln moved ln_final.b
    there): apply_ln_to_stack, the logit lens, tokens_to_residual_directions leave b_U[token] out."""


class ValueBiasWarning(ToolkitWarning):
    """Weight processing moved b_V into b_O (fold_value_biases, refactor_factored_attn_matrices): hook_v / hook_z
    lack it from then on, so reading them or zero-ablating a head there is not ResidualGPT's."""


class NoTokenizerWarning(ToolkitWarning):
    """An export made without a tokenizer (no vocabulary given, none in the checkpoint): it takes token tensors only."""


class UnfoldedLayerNormWarning(ToolkitWarning):
    """A TransformerLens method that reads a LayerNorm as its scale alone (apply_ln_to_stack and what calls it,
    tokens_to_residual_directions) on a model whose LayerNorm weights are not folded into the next weights."""


# skipped to the user's line: the toolkit, and the libraries that call into it (SAELens splices through the export)
_FRAMEWORK = ("interp", "probes", "transformer_lens", "sae_lens", "torch", "functools", "contextlib")


def warn_each_call(message: str, category: type[Warning]) -> None:
    """Warn at the first calling line outside the toolkit and TransformerLens, at every call.

    warnings.warn shows a warning once per calling line under Python's default filter, so a loop over
    layers would show it once; warn_explicit with no registry shows it each time while the user's own
    filters (ignore, error, once) still decide. Python's filters are never touched here. Only a filter the
    user set to 'error' makes it raise: a frame whose module cannot give its source (python -c, standard
    input, exec, a notebook cell) warns without the source line (_source_globals).
    """
    frame = sys._getframe(1)
    while frame.f_back is not None and frame_module(frame).split(".")[0] in _FRAMEWORK:
        frame = frame.f_back
    _warn_explicit(frame, message, category)


def _warn_explicit(frame: types.FrameType, message: str, category: type[Warning]) -> None:
    """warn_explicit at `frame`'s line with no registry (shown at every call unless the user's filters say
    otherwise); the line's source from its module's loader where that gives it, else from its file, else none."""
    import linecache
    import warnings

    filename, lineno = frame.f_code.co_filename, frame.f_lineno or 0  # f_lineno may be None between lines

    def show(module_globals: dict | None) -> None:
        warnings.warn_explicit(
            message,
            category,
            filename,
            lineno,
            module=frame_module(frame) or "<string>",
            registry=None,  # no per-line record: shown at every call
            module_globals=module_globals,
        )

    source_globals = _source_globals(frame.f_globals)
    try:
        show(source_globals)
    except Warning:  # the user's 'error' filter: theirs to see
        raise
    except Exception:  # a loader that gave its source once and fails when linecache asks again: go on without it
        if source_globals is None:
            raise
        linecache.cache.pop(filename, None)  # the entry that loader left, if any
        show(None)


def frame_module(frame: types.FrameType) -> str:
    """A frame's module name; '' where its globals have none, or not a string (exec with any dict)."""
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else ""


def _source_globals(frame_globals: dict) -> dict | None:
    """A frame's globals where their module's loader gives its source, else None (the line's source then comes
    from its file, if any). warn_explicit asks module_globals' __loader__ for the source and lets whatever that
    raises out: python -c's and standard input's __main__ has BuiltinImporter, whose get_source('__main__')
    raises ImportError; a notebook's or exec's globals may hold any loader or none."""
    get_source = getattr(frame_globals.get("__loader__"), "get_source", None)
    name = frame_globals.get("__name__")
    if get_source is None or not isinstance(name, str) or not name:
        return None
    try:
        source = get_source(name)
    except Exception:  # any loader's failure means: no source from it, and the warning goes on
        return None
    return frame_globals if isinstance(source, str) else None  # bytes would break the line's formatting


class ScopedFlag:
    """A flag raised for the length of a with-block, in this thread or task only (a ContextVar): a warning that
    has been given, or a check that has run, says so to the calls inside it."""

    def __init__(self, name: str) -> None:
        self._var: ContextVar[bool] = ContextVar(name, default=False)

    def __bool__(self) -> bool:
        return self._var.get()

    @contextmanager
    def raised(self) -> Iterator[None]:
        token = self._var.set(True)
        try:
            yield
        finally:
            self._var.reset(token)
