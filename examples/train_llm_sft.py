"""The user's documents' LLM fine-tuning samples (Ray Train with transformers and Ray
Data, and the DeepSpeed variant), on raylite.

Changed from the original: the imports, use_gpu=False, and the model: no hub downloads
here, so a tiny GPT-2 and a word-level tokenizer are made and saved locally and their
folder is the `model_name`; `ray_dataset` (left to the reader) holds tokenized
synthetic instructions, tokenized with the documents' own `tokenize_batch` pattern;
2 workers with 1 CPU each instead of 4 with a GPU and 8 CPUs.
"""

import os
import sys
import tempfile

import pandas as pd

import raylite as ray
import raylite.data
import raylite.train
import raylite.train.torch  # noqa: F401
from raylite.train import CheckpointConfig, RunConfig, ScalingConfig
from raylite.train.torch import TorchTrainer

WORDS = "the a model learns to follow short instructions and answer questions well".split()


def make_tiny_model(path):
    """A 2-layer GPT-2 and a word-level tokenizer, saved like a hub checkpoint."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[EOS]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    tokenizer.save_pretrained(path)
    config = GPT2Config(
        vocab_size=len(vocab), n_positions=32, n_embd=32, n_layer=2, n_head=2,
        bos_token_id=vocab["[EOS]"], eos_token_id=vocab["[EOS]"], pad_token_id=vocab["[PAD]"],
    )
    GPT2LMHeadModel(config).save_pretrained(path)


# T.5.4: tokenization as a streaming transformation (the documents' tokenize_batch)
def tokenize_batch(batch, tokenizer_name=None):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
    encodings = tokenizer(
        batch["instruction"].tolist(),
        padding="max_length",
        truncation=True,
        max_length=16,
        return_tensors="np",
    )
    batch["input_ids"] = list(encodings["input_ids"])
    batch["attention_mask"] = list(encodings["attention_mask"])
    batch["labels"] = list(encodings["input_ids"])
    return batch


# T.5.2: the training function, run on each worker
def train_fn(config):
    """Standard PyTorch training function, run on each worker."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Ray Train automatically sets the correct local rank and device
    model = AutoModelForCausalLM.from_pretrained(config["model_name"])
    model = ray.train.torch.prepare_model(model)  # Wraps in DDP
    tokenizer = AutoTokenizer.from_pretrained(config["model_name"])  # noqa: F841 (as in the original)

    # Load data through Ray Data (see T.5.4)
    train_ds = ray.train.get_dataset_shard("train")
    train_loader = train_ds.iter_torch_batches(batch_size=config["batch_size"])

    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"])

    for epoch in range(config["epochs"]):
        total_loss = 0
        for batch in train_loader:
            input_ids = batch["input_ids"].to(ray.train.torch.get_device())
            labels = batch["labels"].to(ray.train.torch.get_device())
            outputs = model(input_ids=input_ids, labels=labels)
            loss = outputs.loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            total_loss += loss.item()
        # Report metrics to Ray Train
        ray.train.report({"epoch": epoch, "loss": total_loss})


# T.5.3: the DeepSpeed variant. DeepSpeed is optional: where it is installed the worker
# already has the process group and RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR it needs.
def train_fn_deepspeed(config):
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        pass
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(config["model_name"], torch_dtype="auto")
    # Ray Train + DeepSpeed: model is wrapped automatically
    model = ray.train.torch.prepare_model(model)
    ray.train.report({"wrapped_in": type(model).__name__})


if __name__ == "__main__":
    model_dir = tempfile.mkdtemp(prefix="tiny-gpt2-")
    make_tiny_model(model_dir)
    ray.init(num_cpus=4)

    rows = [
        {"instruction": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + i % 6))}
        for i in range(128)
    ]
    ds = ray.data.from_pandas(pd.DataFrame(rows))
    ray_dataset = ds.map_batches(
        tokenize_batch,
        fn_kwargs={"tokenizer_name": model_dir},
        batch_format="pandas",
        batch_size=32,
        num_cpus=1,
    )
    for batch in ray_dataset.iter_torch_batches(batch_size=8):
        print(f"tokenized batch: {tuple(batch['input_ids'].shape)}")
        break

    trainer = TorchTrainer(
        train_loop_per_worker=train_fn,
        train_loop_config={"model_name": model_dir, "batch_size": 8, "lr": 1e-3, "epochs": 3},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(
            name="llama-sft-distributed",
            storage_path=os.path.join(tempfile.gettempdir(), "ray_results"),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
        datasets={"train": ray_dataset},  # Ray Data dataset
    )
    result = trainer.fit()
    print(f"Final loss: {result.metrics['loss']:.4f}")
    # train_loader is built once and looped over per epoch: every epoch must see batches
    print(f"Loss per epoch: {[round(x, 3) for x in result.metrics_dataframe['loss']]}")

    trainer = TorchTrainer(
        train_loop_per_worker=train_fn_deepspeed,
        train_loop_config={"model_name": model_dir},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        torch_config=ray.train.torch.TorchConfig(backend="nccl"),  # gloo on CPU, with a warning
        run_config=RunConfig(storage_path=os.path.join(tempfile.gettempdir(), "ray_results")),
    )
    print(f"DeepSpeed-style run: model {trainer.fit().metrics['wrapped_in']}")
    ray.shutdown()
    sys.exit(0)
