"""Tokens: what the provider counted (``Usage``, summed over attempts) and what a text would
cost (``estimate_tokens``, the one estimate: o200k_base when ``bpe-openai`` is installed, else
``length_estimate``, a quarter of the characters)."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import math
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import astuple, dataclass
from typing import Protocol

__all__ = ["ESTIMATE_CHUNK_CHARS", "Usage", "estimate_tokens", "length_estimate"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens used. ``input_tokens`` counts every input token, cached or not; two parts of it
    are also given apart: read from the provider's prompt cache and written to it."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cached_input_tokens: int = 0
    """Part of ``input_tokens`` read from the provider's prompt cache."""
    cache_write_input_tokens: int = 0
    """Part of ``input_tokens`` written to the provider's prompt cache (Anthropic)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """``input_tokens`` neither read from nor written to the prompt cache."""
        return self.input_tokens - self.cached_input_tokens - self.cache_write_input_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def length_estimate(text: str) -> int:
    """``ceil(len(text) / 4)``: the estimate without a tokenizer (and the fake models' usage)."""
    return math.ceil(len(text) / 4)


class _Counter(Protocol):
    def count(self, text: str, /) -> int: ...


_ENCODING_NAME = "o200k_base"
_BINDINGS = "bpe_openai._bindings"
_tokenizer_lock = threading.Lock()
_tokenizer_loaded = False
_tokenizer: _Counter | None = None


def _tokenizer_or_none() -> _Counter | None:
    """o200k_base's tokenizer, loaded once per process, or None without ``bpe-openai`` (its
    Rust part alone where this version keeps it: the package's import takes ~1.2 s)."""
    global _tokenizer_loaded, _tokenizer
    if _tokenizer_loaded:
        return _tokenizer
    with _tokenizer_lock:
        if not _tokenizer_loaded:
            _tokenizer = _load_tokenizer()
            _tokenizer_loaded = True
    return _tokenizer


def _load_tokenizer() -> _Counter | None:
    loaders: tuple[Callable[[], _Counter], ...] = (_rust_tokenizer, _PublicTokenizer)
    for load in loaders:  # the Rust part alone; another layout of bpe-openai: its public API
        try:
            return load()
        except Exception:  # the tokenizer is optional: the length estimate stands in
            continue
    return None


def _rust_tokenizer() -> _Counter:
    bindings = sys.modules.get(_BINDINGS)
    if bindings is None:
        package = importlib.util.find_spec("bpe_openai")  # finds it without importing it
        if package is None or not package.submodule_search_locations:
            raise ImportError("bpe_openai is not installed")
        found = importlib.machinery.PathFinder.find_spec(
            "_bindings", list(package.submodule_search_locations)
        )
        if found is None or found.origin is None:
            raise ImportError("bpe_openai has no _bindings module")
        spec = importlib.util.spec_from_file_location(_BINDINGS, found.origin)
        assert spec is not None and spec.loader is not None
        bindings = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bindings)
        sys.modules[_BINDINGS] = bindings
    tokenizer: _Counter = bindings.tokenizer_for_encoding(_ENCODING_NAME)
    if tokenizer.count("hello world") != 2:  # o200k_base's count; anything else is not it
        raise ImportError("bpe_openai._bindings does not count as o200k_base")
    return tokenizer


class _PublicTokenizer:
    """``count`` through bpe-openai's public, tiktoken-like API."""

    def __init__(self) -> None:
        # bpe-openai's import warns about its own use of importlib.resources; under `-W error`
        # (or pytest's filterwarnings = error) that warning would silently cost the tokenizer,
        # and the counts would depend on which code imported it first.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module("bpe_openai")
            self._encoding = module.get_encoding(_ENCODING_NAME)

    def count(self, text: str, /) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


ESTIMATE_CHUNK_CHARS = 50_000
"""``estimate_tokens`` counts long texts in pieces of about this many characters, each ending
after a comma, space or newline when one is near."""


def _chunks(text: str, size: int = ESTIMATE_CHUNK_CHARS) -> list[str]:
    pieces: list[str] = []
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = max(text.rfind(sep, start + size // 2, end) for sep in ", \n")
        end = cut + 1 if cut > start else end
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    return pieces


def estimate_tokens(text: str) -> int:
    """Output tokens of ``text``: o200k_base's count when ``bpe-openai`` is importable, else
    ``ceil(len(text) / 4)``. Never fails: long texts are counted in pieces
    (``ESTIMATE_CHUNK_CHARS``), and a piece the tokenizer refuses by its length."""
    tokenizer = _tokenizer_or_none()
    if tokenizer is None:
        return length_estimate(text)
    total = 0
    for piece in _chunks(text):
        try:
            total += _count(tokenizer, piece)
        except Exception:  # an estimate never fails a run: count this piece by its length
            total += length_estimate(piece)
    return total


def _count(tokenizer: _Counter, piece: str) -> int:
    try:
        return tokenizer.count(piece)
    except UnicodeEncodeError:  # a lone surrogate (JSON may hold one): counted as U+FFFD
        return tokenizer.count(piece.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))
