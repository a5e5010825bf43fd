"""Text and hashing preprocessors: ``Tokenizer``, ``CountVectorizer``, ``HashingVectorizer`` and
``FeatureHasher``. Hashes are sha256 of the token's text modulo the number of features, so the
same token lands in the same slot in every process and run."""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from raylite.data.preprocessors.preprocessor import Preprocessor, check_columns, output_columns_for


def simple_split_tokenizer(value: str) -> list[str]:
    """The default tokenizer: split on the space character."""
    return value.split(" ")


def simple_hash(value: object, num_features: int) -> int:
    """A stable hash of ``str(value)`` into ``[0, num_features)``."""
    return int(hashlib.sha256(str(value).encode()).hexdigest(), 16) % num_features


class Tokenizer(Preprocessor):
    """Each string becomes a list of tokens (``tokenization_fn``, default: split on spaces)."""

    _is_fittable = False

    def __init__(self, columns: list[str], tokenization_fn: Callable[[str], list[str]] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.tokenization_fn = tokenization_fn or simple_split_tokenizer
        self.output_columns = output_columns_for(columns, output_columns)

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "Tokenizer")
        for col, out in zip(self.columns, self.output_columns):
            df[out] = [None if v is None else self.tokenization_fn(v) for v in df[col]]
        return df


class CountVectorizer(Preprocessor):
    """Each string becomes token counts over the fitted vocabulary: the most frequent tokens
    first (ties in text order), at most ``max_features`` of them."""

    def __init__(self, columns: list[str], tokenization_fn: Callable[[str], list[str]] | None = None,
                 max_features: int | None = None, *, output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.tokenization_fn = tokenization_fn or simple_split_tokenizer
        self.max_features = max_features
        self.output_columns = output_columns_for(columns, output_columns)

    def _fit(self, ds: Any) -> dict[str, Any]:
        counts: dict[str, collections.Counter] = {c: collections.Counter() for c in self.columns}
        for batch in ds.select_columns(self.columns).iter_batches(batch_size=None, batch_format="pandas"):
            for c in self.columns:
                for text in batch[c]:
                    if text is not None:
                        counts[c].update(self.tokenization_fn(text))
        stats = {}
        for c, counter in counts.items():
            vocab = sorted(counter, key=lambda t: (-counter[t], t))[:self.max_features]
            stats[f"token_counts({c})"] = {t: i for i, t in enumerate(vocab)}
        return stats

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "CountVectorizer")
        assert self.stats_ is not None
        for col, out in zip(self.columns, self.output_columns):
            vocab = self.stats_[f"token_counts({col})"]
            vectors = np.zeros((len(df), len(vocab)), dtype=np.int64)
            for row, text in enumerate(df[col]):
                for token in self.tokenization_fn(text) if text is not None else []:
                    j = vocab.get(token)
                    if j is not None:
                        vectors[row, j] += 1
            df[out] = list(vectors)
        return df


class HashingVectorizer(Preprocessor):
    """Each string becomes ``num_features`` token counts, a token's slot given by its hash
    (no vocabulary to fit)."""

    _is_fittable = False

    def __init__(self, columns: list[str], num_features: int,
                 tokenization_fn: Callable[[str], list[str]] | None = None, *,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.num_features = num_features
        self.tokenization_fn = tokenization_fn or simple_split_tokenizer
        self.output_columns = output_columns_for(columns, output_columns)

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "HashingVectorizer")
        for col, out in zip(self.columns, self.output_columns):
            vectors = np.zeros((len(df), self.num_features), dtype=np.int64)
            for row, text in enumerate(df[col]):
                for token in self.tokenization_fn(text) if text is not None else []:
                    vectors[row, simple_hash(token, self.num_features)] += 1
            df[out] = list(vectors)
        return df


class FeatureHasher(Preprocessor):
    """Numeric columns (e.g. token counts) summed into a ``num_features`` vector in
    ``output_column``, each column's slot given by the hash of its name."""

    _is_fittable = False

    def __init__(self, columns: list[str], num_features: int, output_column: str) -> None:
        super().__init__()
        self.columns = list(columns)
        self.num_features = num_features
        self.output_column = output_column

    def _transform_pandas(self, df: Any) -> Any:
        check_columns(df, self.columns, "FeatureHasher")
        vectors = np.zeros((len(df), self.num_features), dtype=np.asarray(df[self.columns]).dtype)
        for col in self.columns:
            vectors[:, simple_hash(col, self.num_features)] += df[col].to_numpy()
        df[self.output_column] = list(vectors)
        return df
