"""The user's documents' PyTorch Lightning integration sample, on raylite.

Changed from the original: the imports (ray.train.lightning -> raylite.train.lightning),
use_gpu=False, and the parts it leaves to the reader: MyLightningModule and
MyDataModule are a small regression model and synthetic data, and the TorchTrainer
launch plus RayTrainReportCallback (to see metrics and checkpoints) are added.
"""

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from raylite.train import RunConfig, ScalingConfig
from raylite.train.lightning import (
    RayDDPStrategy,
    RayLightningEnvironment,
    RayTrainReportCallback,
    prepare_trainer,
)
from raylite.train.torch import TorchTrainer


class MyLightningModule(pl.LightningModule):
    def __init__(self, config):
        super().__init__()
        self.lr = config["lr"]
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class MyDataModule(pl.LightningDataModule):
    def __init__(self, config):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        x = torch.randn(512, 8, generator=g)
        self.data = TensorDataset(x, x.sum(dim=1, keepdim=True))

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=32, shuffle=True)


def train_func(config):
    model = MyLightningModule(config)
    datamodule = MyDataModule(config)
    trainer = pl.Trainer(
        max_epochs=config["epochs"],
        strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback()],
        accelerator="auto",
        devices="auto",
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    trainer = prepare_trainer(trainer)
    trainer.fit(model, datamodule=datamodule)


trainer = TorchTrainer(
    train_func,
    train_loop_config={"lr": 0.05, "epochs": 3},
    scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
    run_config=RunConfig(name="lightning_example"),
)
result = trainer.fit()
print(f"Lightning train_loss per epoch: {list(result.metrics_dataframe['train_loss'].round(4))}")
print(f"Checkpoint: {result.checkpoint}")
