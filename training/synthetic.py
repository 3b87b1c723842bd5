"""A synthetic character corpus whose reference levels are known in closed form.

A seeded order-k character Markov chain (k = 2 by default): the next character depends on the last k. Its
stationary distribution gives, exactly,

    unigram_entropy   H(X_t)                    the level of a model that knows nothing of context
    bigram_entropy    H(X_{t+1} | X_t)          the best any model that sees only the current token can do
    entropy_rate      H(X_{t+1} | last k)       the best any model can do (below bigram when k >= 2)

so the project's reference-level code can be checked against theory, and every test that needs data runs on
a machine without TinyShakespeare. `load_corpus("synthetic")` returns the default chain's corpus;
`write_data_dir(root)` lays its text out as root/tinyshakespeare/input.txt, a data directory the loaders
read through $RESIDUAL_DATA_DIR like the real one.

Transitions mix a sharp first-order part with a sharp k-th-order part, so (like text) the bigram level sits
well below the unigram one and the entropy rate below both.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from jaxtyping import Float

from interp.errors import DataError
from interp.files.io import atomic_write
from training.corpus import Corpus, char_codec

ALPHABET = "".join(sorted(" \n!',.:;?abcdefghijklmnopqrstuvw"))  # 32 characters; sorted, as the char loader's vocab
DEFAULT_TOKENS = 1_000_000  # about TinyShakespeare's 1.1M characters
DEFAULT_SEED = 1234


@dataclass(frozen=True)
class MarkovChain:
    """P(next | last `order` tokens) as a [V**order, V] table; state index = base-V number of the last tokens."""

    transitions: Float[np.ndarray, "state vocab"]
    order: int

    @property
    def vocab_size(self) -> int:
        return self.transitions.shape[1]

    def next_state(self) -> np.ndarray:
        """[state, token] -> the state after emitting token (drop the oldest, append token)."""
        n_states, v = self.transitions.shape
        return (np.arange(n_states)[:, None] * v + np.arange(v)[None, :]) % n_states

    @functools.cached_property
    def stationary(self) -> Float[np.ndarray, " state"]:
        """The stationary distribution over states, by power iteration (every transition > 0: unique)."""
        nxt = self.next_state().ravel()
        pi = np.full(self.transitions.shape[0], 1.0 / self.transitions.shape[0])
        for _ in range(10_000):
            new = np.bincount(nxt, weights=(pi[:, None] * self.transitions).ravel(), minlength=len(pi))
            if np.abs(new - pi).sum() < 1e-15:
                return new
            pi = new
        raise DataError("the Markov chain's stationary distribution did not converge")

    def pair_distribution(self) -> Float[np.ndarray, "current next"]:
        """Stationary P(X_t = a, X_{t+1} = b)."""
        v = self.vocab_size
        joint = self.stationary[:, None] * self.transitions  # P(state, next)
        current = np.arange(joint.shape[0]) % v  # the state's last token
        return np.stack([joint[current == a].sum(0) for a in range(v)])


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def unigram_entropy(chain: MarkovChain) -> float:
    """H(X_t) under the stationary distribution (nats): the unigram cross-entropy of an infinite sample."""
    return _entropy(chain.pair_distribution().sum(1))


def bigram_entropy(chain: MarkovChain) -> float:
    """H(X_{t+1} | X_t) = H(X_t, X_{t+1}) - H(X_t) (nats): the bigram cross-entropy of an infinite sample."""
    pairs = chain.pair_distribution()
    return _entropy(pairs) - _entropy(pairs.sum(1))


def entropy_rate(chain: MarkovChain) -> float:
    """H(X_{t+1} | the last `order` tokens) (nats): no model can do better."""
    rows = -(chain.transitions * np.log(chain.transitions)).sum(1)
    return float(chain.stationary @ rows)


def markov_chain(
    vocab_size: int = len(ALPHABET),
    order: int = 2,
    seed: int = DEFAULT_SEED,
    concentration: float = 0.1,
    first_order_weight: float = 0.5,
) -> MarkovChain:
    """A seeded chain: each row mixes a Dirichlet(concentration) row of the last token with one of the state."""
    if order < 1 or vocab_size < 2 or not 0 <= first_order_weight <= 1 or concentration <= 0:
        raise DataError("need order >= 1, vocab_size >= 2, 0 <= first_order_weight <= 1, concentration > 0")
    rng = np.random.default_rng(seed)
    n_states = vocab_size**order
    first = rng.dirichlet(np.full(vocab_size, concentration), size=vocab_size)  # P(next | last token)
    full = rng.dirichlet(np.full(vocab_size, concentration), size=n_states)  # P(next | last `order` tokens)
    table = first_order_weight * first[np.arange(n_states) % vocab_size] + (1 - first_order_weight) * full
    table = np.maximum(table, 1e-12)  # every transition possible: one stationary distribution, and log > -inf
    return MarkovChain(transitions=table / table.sum(1, keepdims=True), order=order)


def sample(chain: MarkovChain, n_tokens: int, seed: int) -> np.ndarray:
    """n_tokens ids drawn from the chain, its first state drawn from the stationary distribution."""
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(chain.transitions, axis=1)
    cumulative /= cumulative[:, -1:]
    rows = cumulative.tolist()  # plain lists: bisect on them is the fast path in a Python loop
    n_states, v = chain.transitions.shape
    state = int(rng.choice(n_states, p=chain.stationary))
    out = np.empty(n_tokens, dtype=np.uint16)
    for i, u in enumerate(rng.random(n_tokens).tolist()):
        token = min(bisect.bisect_right(rows[state], u), v - 1)
        out[i] = token
        state = (state * v + token) % n_states
    return out


@functools.lru_cache(maxsize=4)
def _sampled(n_tokens: int, seed: int, order: int) -> tuple[MarkovChain, np.ndarray]:
    chain = markov_chain(order=order, seed=seed)
    ids = sample(chain, n_tokens, seed=seed + 1)
    ids.flags.writeable = False  # shared between callers through the cache
    return chain, ids


def synthetic_corpus(n_tokens: int = DEFAULT_TOKENS, seed: int = DEFAULT_SEED, order: int = 2) -> Corpus:
    """The chain's sample as a char Corpus over ALPHABET, split 90/10 like shakespeare_char."""
    if n_tokens < 20:
        raise DataError(f"a synthetic corpus needs at least 20 tokens, got {n_tokens}")
    _, ids = _sampled(n_tokens, seed, order)
    encode, decode = char_codec(list(ALPHABET))
    n_train = int(n_tokens * 0.9)
    return Corpus(
        name="synthetic",
        vocab_size=len(ALPHABET),
        train=ids[:n_train],
        val=ids[n_train:],
        encode=encode,
        decode=decode,
        vocab=list(ALPHABET),
        encoding="char",
    )


def synthetic_chain(seed: int = DEFAULT_SEED, order: int = 2) -> MarkovChain:
    """The chain behind synthetic_corpus(seed=seed, order=order)."""
    return markov_chain(order=order, seed=seed)


def synthetic_text(n_tokens: int = DEFAULT_TOKENS, seed: int = DEFAULT_SEED, order: int = 2) -> str:
    return "".join(ALPHABET[i] for i in _sampled(n_tokens, seed, order)[1])


def write_data_dir(root: str | Path, n_tokens: int = DEFAULT_TOKENS, seed: int = DEFAULT_SEED) -> Path:
    """root/tinyshakespeare/input.txt holding the synthetic text: a $RESIDUAL_DATA_DIR the char loader reads.

    Loaded as "shakespeare_char" it gives the same ids and split as synthetic_corpus(n_tokens, seed).
    """
    path = Path(root) / "tinyshakespeare" / "input.txt"
    text = synthetic_text(n_tokens, seed)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return Path(root)
