"""A Lightning script as a user would write it: DDP on CPU, one device per node, two nodes.

    python lightning_ddp.py        # under torchrun --nnodes 2, meshrun run or meshrun simulate

LIGHTNING_NODES and LIGHTNING_STEPS (default 30), as a user might set them: the number of
nodes and the training's length (bench/observe.py runs it longer, on 4 nodes). Without
LIGHTNING_NODES the node count is the world's (WORLD_SIZE / 1 device): what a script whose
job may shrink does (Lightning checks num_nodes x devices against WORLD_SIZE).
LIGHTNING_CKPT_DIR: save ``last.ckpt`` there every 5 steps and resume from it when it exists
(what a script needs to go on after meshrun restarted its workers: a spare's take-over, a
shrink).

It knows nothing of meshrun: Lightning finds the ranks in the torch elastic variables. Each
rank prints ``REPORT {...}``: the ranks and world size Lightning saw, the last loss and a
checksum of the final weights.
"""

import json
import os

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                       torch.nn.Linear(16, 1))
        self.last = float("nan")

    def training_step(self, batch, _index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.last = float(loss.detach())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def data() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1
    return DataLoader(TensorDataset(x, y), batch_size=16)


L.seed_everything(0, verbose=False)
model = Regression()
folder = os.environ.get("LIGHTNING_CKPT_DIR")
saving = [L.pytorch.callbacks.ModelCheckpoint(dirpath=folder, save_last=True,
                                              every_n_train_steps=5)] if folder else []
trainer = L.Trainer(accelerator="cpu", strategy="ddp", devices=1,
                    num_nodes=int(os.environ.get("LIGHTNING_NODES")
                                  or os.environ.get("WORLD_SIZE", "2")),
                    max_steps=int(os.environ.get("LIGHTNING_STEPS", "30")),
                    logger=False, enable_checkpointing=bool(folder), callbacks=saving,
                    enable_progress_bar=False,
                    enable_model_summary=False, deterministic=True)
last = os.path.join(folder, "last.ckpt") if folder else None
if last and os.path.exists(last):
    print(f"resuming from {last}", flush=True)
trainer.fit(model, data(), ckpt_path=last if last and os.path.exists(last) else None)
print("REPORT " + json.dumps({
    "rank": trainer.global_rank, "world_size": trainer.world_size,
    "node_rank": trainer.node_rank, "local_rank": trainer.local_rank,
    "loss": model.last,
    "weights": float(sum(p.detach().double().sum() for p in model.parameters()))}), flush=True)
