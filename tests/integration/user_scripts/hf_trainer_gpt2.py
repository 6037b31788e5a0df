"""A Hugging Face Trainer script as a user would write it: a tiny GPT-2 built from a config, a
word-level tokenizer built here (no download), trained for 8 steps with a checkpoint at step 4;
then a second Trainer resumes from that checkpoint and trains steps 5-8 again.

    python hf_trainer_gpt2.py OUTPUT_DIR      # under torchrun, meshrun run or meshrun simulate

HF_STEPS (default 8): the full run's length, a checkpoint at its half (bench/observe.py runs
it longer); HF_RESUME=0 skips the resumed run. HF_SAVE_STEPS: a checkpoint every that many
steps instead; HF_RESUME_LAST=1: the full run resumes from the newest checkpoint in
OUTPUT_DIR when there is one (what a script needs to go on after meshrun restarted its
workers: a spare's take-over).

It knows nothing of meshrun. Each rank prints one line ``REPORT {...}``: its rank, the world
size the Trainer saw, the last loss of the full run and of the resumed run, and a checksum of
the final weights of each (they must agree: resuming is exact).
"""

import json
import os
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

OUT = sys.argv[1]
WORDS = "the quick brown fox jumps over a lazy dog while seven small cats watch it run".split()


def tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(
        special_tokens=["[UNK]", "[PAD]", "[EOS]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   eos_token="[EOS]")


def dataset(tok: PreTrainedTokenizerFast) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(64):  # sentences of 12 words drawn with a fixed seed
        picks = torch.randint(len(WORDS), (12,), generator=g).tolist()
        enc = tok(" ".join(WORDS[i] for i in picks))
        rows.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
    return rows


def model(tok: PreTrainedTokenizerFast) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tok), n_positions=16, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id)
    return GPT2LMHeadModel(config)


STEPS = int(os.environ.get("HF_STEPS", "8"))
HALF = max(1, STEPS // 2)
SAVE = int(os.environ.get("HF_SAVE_STEPS", "0")) or HALF


def args(output_dir: str) -> TrainingArguments:
    return TrainingArguments(output_dir=output_dir, max_steps=STEPS, save_steps=SAVE,
                             logging_steps=1 if STEPS <= 100 else 50,
                             per_device_train_batch_size=4, learning_rate=3e-3, seed=0,
                             data_seed=0, use_cpu=True, ddp_backend="gloo", report_to=[],
                             dataloader_num_workers=0, save_strategy="steps",
                             disable_tqdm=True)


def last_loss(trainer: Trainer) -> float:
    return [log["loss"] for log in trainer.state.log_history if "loss" in log][-1]


def checksum(net: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in net.parameters()))


tok = tokenizer()
data = dataset(tok)
collate = DataCollatorForLanguageModeling(tok, mlm=False)

full = Trainer(model=model(tok), args=args(OUT), train_dataset=data, data_collator=collate)
def complete(folder: str) -> bool:
    """Rank 0 writes trainer_state.json last of its files, but every rank writes its own
    rng_state_<rank>.pth beside it with no barrier between: a rank killed while saving
    leaves a checkpoint with trainer_state.json and a truncated rng file of its own, on
    which the resume fails (EOFError). Complete: trainer_state.json and every rng file
    loads. (transformers' get_last_checkpoint checks neither.)"""
    import torch

    if not os.path.exists(os.path.join(folder, "trainer_state.json")):
        return False
    for name in os.listdir(folder):
        if name.startswith("rng_state") and name.endswith(".pth"):
            try:
                torch.load(os.path.join(folder, name), weights_only=False)
            except Exception:  # noqa: BLE001 - truncated or empty: not this one
                return False
    return True


if os.environ.get("HF_RESUME_LAST") == "1":
    # the newest *complete* checkpoint (a process killed while saving leaves a partial one)
    done = [os.path.join(OUT, d) for d in (os.listdir(OUT) if os.path.isdir(OUT) else [])
            if d.startswith("checkpoint-") and complete(os.path.join(OUT, d))]
    last = max(done, key=lambda d: int(d.rsplit("-", 1)[1]), default=None)
    print(f"resuming from {last}" if last else "starting from scratch", flush=True)
    full.train(resume_from_checkpoint=last)
else:
    full.train()
if os.environ.get("HF_RESUME", "1") == "0":
    print("REPORT " + json.dumps({
        "rank": full.args.process_index, "world_size": full.args.world_size,
        "local_rank": full.args.local_process_index, "loss": last_loss(full),
        "weights": checksum(full.model)}), flush=True)
    sys.exit(0)
resumed = Trainer(model=model(tok), args=args(OUT + "-resumed"), train_dataset=data,
                  data_collator=collate)
resumed.train(resume_from_checkpoint=os.path.join(OUT, f"checkpoint-{HALF}"))

print("REPORT " + json.dumps({
    "rank": full.args.process_index, "world_size": full.args.world_size,
    "local_rank": full.args.local_process_index,
    "loss": last_loss(full), "resumed_loss": last_loss(resumed),
    "weights": checksum(full.model), "resumed_weights": checksum(resumed.model),
    "resumed_steps": resumed.state.global_step - HALF}), flush=True)
