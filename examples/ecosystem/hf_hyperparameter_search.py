"""Hugging Face transformers' `Trainer.hyperparameter_search(backend="ray")` on a tiny local model.

A two-layer BERT of width 32 is built from a config and saved with `save_pretrained` (nothing is
downloaded); its task is to tell whether a sequence of token ids holds token 7. On Ray (ray), the
Trainer hands the search to `ray.tune.run`: a grid of two learning rates, each trial a Tune trial
that trains and evaluates and reports its objective (the eval loss). Natively (native), the same
two configs are trained one after the other with plain `Trainer.train()`. Every run is seeded and
single-threaded, so each learning rate gives the same eval loss both ways.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import main, start_ray  # noqa: E402

LEARNING_RATES = [3e-3, 3e-4]


class Sequences:
    """Token sequences labelled 1 when they contain token 7: a torch-style map dataset."""

    def __init__(self, count: int, seed: int):
        import torch

        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(8, 60, (count, 12), generator=gen)
        mark = torch.rand(count, generator=gen) < 0.5
        where = torch.randint(0, 12, (count,), generator=gen)
        self.ids[mark, where[mark]] = 7
        self.labels = mark.long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "attention_mask": self.ids[i] * 0 + 1, "labels": self.labels[i]}


def make_trainer(model_dir: str, out_dir: str):
    from transformers import BertForSequenceClassification, Trainer, TrainingArguments

    def model_init(trial=None):
        import torch

        torch.set_num_threads(1)  # the same arithmetic in a Tune worker and in this process
        return BertForSequenceClassification.from_pretrained(model_dir)

    args = TrainingArguments(output_dir=out_dir, num_train_epochs=2, per_device_train_batch_size=16,
                             per_device_eval_batch_size=32, eval_strategy="no", save_strategy="no",
                             logging_strategy="no", report_to=[], seed=0, disable_tqdm=True,
                             use_cpu=True, dataloader_num_workers=0)
    return Trainer(model_init=model_init, args=args, train_dataset=Sequences(128, seed=1),
                   eval_dataset=Sequences(64, seed=2))


def save_tiny_model(model_dir: str) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16, num_labels=2)
    import torch

    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(model_dir)


def on_ray(cpus: int) -> dict:
    from ray import tune

    work = tempfile.mkdtemp(prefix="hf-hp-")
    save_tiny_model(f"{work}/model")
    trainer = make_trainer(f"{work}/model", f"{work}/out")
    best = trainer.hyperparameter_search(
        hp_space=lambda _: {"learning_rate": tune.grid_search(LEARNING_RATES)},
        backend="ray", direction="minimize", n_trials=1,
        storage_path=f"{work}/ray_results", verbose=0)
    analysis = best.run_summary
    by_lr = {f"{t.config['learning_rate']:g}": round(t.last_result["objective"], 5) for t in analysis.trials}
    return {"eval_loss_by_lr": by_lr, "best_lr": f"{best.hyperparameters['learning_rate']:g}",
            "best_objective": round(best.objective, 5)}


def native(cpus: int) -> dict:
    work = tempfile.mkdtemp(prefix="hf-hp-")
    save_tiny_model(f"{work}/model")
    by_lr = {}
    for lr in LEARNING_RATES:
        trainer = make_trainer(f"{work}/model", f"{work}/out")
        trainer.args.learning_rate = lr
        trainer.train()
        by_lr[f"{lr:g}"] = round(trainer.evaluate()["eval_loss"], 5)
    best_lr = min(by_lr, key=by_lr.get)
    return {"eval_loss_by_lr": by_lr, "best_lr": best_lr, "best_objective": by_lr[best_lr]}


if __name__ == "__main__":
    main(on_ray, native, start_ray)
