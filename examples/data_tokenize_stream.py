"""Seed sample T.5.4 "Ray Data: Streaming Data Pipelines", run on raylite.

Changes from the user's code: imports (``raylite`` for ``ray``), a local
Parquet directory instead of ``s3://bucket/delta/instruction_pairs/``, and,
where ``transformers`` or the Llama tokenizer cannot be loaded (no network),
a small whitespace tokenizer with the same call signature. ``num_cpus=2`` per
map task fits the 2-CPU local cluster that ``read_parquet`` starts on demand.

``batch["input_ids"] = encodings["input_ids"]`` puts a 2-D array into a pandas
column; raylite's pandas batches accept that (one row per sub-array) and turn
it into a tensor column, so ``iter_torch_batches`` yields (8, 512) tensors.
"""

import os
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import raylite as ray
import raylite.data  # noqa: F401  (the seed's "import ray.data")


class WhitespaceTokenizer:
    """Stand-in for AutoTokenizer when the real one cannot be downloaded."""

    @classmethod
    def from_pretrained(cls, name):
        return cls()

    def __call__(self, texts, padding="max_length", truncation=True, max_length=512, return_tensors="np"):
        ids = np.zeros((len(texts), max_length), dtype=np.int64)
        mask = np.zeros((len(texts), max_length), dtype=np.int64)
        for i, text in enumerate(texts):
            toks = [hash(w) % 32000 for w in text.split()][:max_length]
            ids[i, : len(toks)] = toks
            mask[i, : len(toks)] = 1
        return {"input_ids": ids, "attention_mask": mask}


def _auto_tokenizer():
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B", local_files_only=True)
        return AutoTokenizer
    except Exception:  # noqa: BLE001  no transformers, or the tokenizer is not on this machine
        return WhitespaceTokenizer


AutoTokenizer = _auto_tokenizer()


def write_instruction_pairs(path: str, files: int = 3, rows: int = 400) -> None:
    rng = np.random.default_rng(1)
    verbs = ["Summarize", "Translate", "Explain", "List", "Rewrite"]
    for i in range(files):
        instr = [f"{rng.choice(verbs)} the paragraph number {j} in plain words" for j in range(rows)]
        table = pa.table({"instruction": instr, "response": ["..."] * rows})
        pq.write_table(table, os.path.join(path, f"pairs-{i:03d}.parquet"))


# Apply preprocessing as a streaming transformation
def tokenize_batch(batch, tokenizer_name="meta-llama/Llama-3.1-8B"):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
    encodings = tokenizer(
        batch["instruction"].tolist(),
        padding="max_length",
        truncation=True,
        max_length=512,
        return_tensors="np",
    )
    batch["input_ids"] = encodings["input_ids"]
    batch["attention_mask"] = encodings["attention_mask"]
    return batch


if __name__ == "__main__":
    data_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="instruction-pairs-")
    write_instruction_pairs(data_dir)

    # Read a large dataset in streaming fashion
    ds = ray.data.read_parquet(data_dir)

    # Map runs in parallel across the cluster
    tokenized_ds = ds.map_batches(
        tokenize_batch,
        batch_format="pandas",
        batch_size=256,
        num_cpus=2,  # CPU resources per map task
    )
    # Stream directly into training (no materialization)
    for batch in tokenized_ds.iter_torch_batches(batch_size=8):
        print(batch["input_ids"].shape)
        break  # Just demonstrating the interface
    ray.shutdown()
