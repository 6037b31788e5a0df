"""A tqdm progress bar over 30 items (a few seconds), then one line per rank: what an
HF Trainer or Lightning script shows while it trains."""

import os
import time

from tqdm import tqdm

for _ in tqdm(range(30), mininterval=0):
    time.sleep(0.1)
print(f"hello from rank {os.environ['RANK']}", flush=True)
