"""The job config: layers and their precedence, profiles, the effective-batch and lr
arithmetic (seed 001's numbers), every bad input as one line with the key and a fix,
the round trip to the workers, and no torch on import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from meshrun.errors import EXIT_USAGE, UsageError
from meshrun.job import (
    ALL_KEYS,
    ENV_VAR,
    JobConfig,
    from_env,
    load_file,
    parse_sets,
    recipe_name,
    resolve,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "configs"

# Seed 001 (TAEHV on 8 machines x 8 H100): train_batch_size 4 per GPU, gradient
# accumulation 1, learning rate 2e-4, "有效batch: 4 x 64 = 256"; its 16-GPU column has
# effective batch 128 at lr 1e-4. Per-device 4 at 16 GPUs makes 128 with grad_accum 2.
SEED001 = {
    "recipe": "autoencoder",
    "train": {"per_device_batch": 4, "grad_accum": 1, "lr": 2e-4,
              "lr_tuned_for_batch": 256, "lr_scaling": "linear"},
    "profiles": {"16": {"train": {"grad_accum": 2}}},
}


def job(file_data=None, sets=(), *, nnodes=1, nproc=1, recipe_defaults=None,
        path="job.toml") -> JobConfig:
    return resolve(recipe_defaults=recipe_defaults, file_data=file_data,
                   sets=parse_sets(list(sets)), world_size=nnodes * nproc,
                   nproc_per_node=nproc, nnodes=nnodes, run_id="mr-test",
                   config_path=path if file_data is not None else None)


# --- precedence -------------------------------------------------------------------------------

# A recipe of the tests' own (not registered: its model keys are checked by nobody).
RECIPE = {"recipe": "demo", "train": {"steps": 50, "lr": 3e-3},
          "model": {"hidden": 64, "dropout": 0.0, "bias": True, "act": "gelu"}}


@pytest.mark.parametrize("file_data, sets, steps, source", [
    (None, [], 50, "recipe demo"),
    ({"train": {"steps": 40}}, [], 40, "config job.toml"),
    ({"train": {"steps": 40}, "profiles": {"4": {"train": {"steps": 30}}}}, [], 30,
     "profiles.4"),
    ({"train": {"steps": 40}, "profiles": {"4": {"train.steps": 30}}}, ["train.steps=20"],
     20, "--set"),
    ({"train": {"steps": 40}, "profiles": {"8": {"train": {"steps": 30}}}}, [], 40,
     "config job.toml"),
], ids=["recipe-beats-default", "file-beats-recipe", "profile-beats-file",
        "set-beats-profile", "other-size-profile-ignored"])
def test_precedence_chain(file_data, sets, steps, source):
    cfg = job(file_data, sets, nnodes=2, nproc=2, recipe_defaults=RECIPE)
    assert (cfg.train.steps, cfg.source["train.steps"]) == (steps, source)
    # keys nobody overrode keep their layer
    assert (cfg.train.lr, cfg.source["train.lr"]) == (3e-3, "recipe demo")
    assert (cfg.parallel.tp, cfg.source["parallel.tp"]) == (1, "default")


def test_built_in_defaults_without_any_layer():
    cfg = job()
    assert cfg.recipe is None and cfg.model == {}
    assert (cfg.train.steps, cfg.train.grad_accum, cfg.checkpoint.keep) == (100, 1, 3)
    assert cfg.checkpoint.dir == "checkpoints/mr-test"
    assert set(cfg.source.values()) == {"default", 'default: "" means checkpoints/<run id>'}


def test_recipe_profile_yields_to_the_users_file():
    recipe = dict(RECIPE, profiles={"4": {"train": {"steps": 7, "lr": 1e-3}}})
    cfg = job({"train": {"steps": 40}}, nnodes=2, nproc=2, recipe_defaults=recipe)
    assert (cfg.train.steps, cfg.source["train.steps"]) == (40, "config job.toml")
    assert (cfg.train.lr, cfg.source["train.lr"]) == (1e-3, "recipe demo profiles.4")


def test_recipe_name_from_file_or_set():
    assert recipe_name({"recipe": "autoencoder"}, {"recipe": "mlp-tp"}) == "mlp-tp"
    assert recipe_name({"recipe": "autoencoder"}, None) == "autoencoder"
    assert recipe_name(None, {}) is None


def test_model_values_checked_against_the_recipe():
    cfg = job({"model": {"hidden": 128, "dropout": 1}}, ["model.act=relu"],
              recipe_defaults=RECIPE)
    assert cfg.model == {"hidden": 128, "dropout": 1.0, "bias": True, "act": "relu"}
    assert cfg.source["model.hidden"] == "config job.toml"
    # without recipe model defaults the table is free-form
    assert job({"model": {"anything": "goes"}}).model == {"anything": "goes"}


@pytest.mark.parametrize("data, sets, nproc, words", [
    ({"recipe": "mlp-tp", "model": {"hidden": 101}}, ["parallel.tp=2"], 2,
     "model.hidden: 101 is not divisible by tp 2"),
    ({"recipe": "mlp-tp"}, ["model.depth=0"], 2, "model.depth: 0 is not a positive integer"),
    ({"recipe": "mlp-tp", "model": {"width": 3}}, [], 2, "unknown key(s) width for mlp-tp"),
    ({"recipe": "autoencoder"}, ["parallel.tp=2"], 2, "the autoencoder has no tensor parallel"),
    ({"recipe": "autoencoder", "model": {"frames": 7}}, [], 1, "model.frames: 7 is odd"),
    ({"recipe": "autoencoder", "model": {"size": 30}}, [], 1, "model.size: 30 is not a multiple"),
], ids=["hidden-not-divisible-by-tp", "depth-zero", "unknown-mlp-key", "autoencoder-tp",
        "odd-frames", "size-not-multiple-of-4"])
def test_registered_recipes_models_are_checked_when_planning(data, sets, nproc, words):
    """What the workers would refuse after start-up, refused by the plan (exit 2, nothing
    started): the registered recipe's model check, over its own defaults."""
    with pytest.raises(UsageError) as caught:
        job(data, sets, nproc=nproc)
    assert words in caught.value.line() and "fix: " in caught.value.line()
    # the recipes' defaults pass
    assert job({"recipe": data["recipe"]}, nproc=nproc if data["recipe"] == "mlp-tp" else 1)


# --- effective batch and learning rate ----------------------------------------------------------

def test_seed001_64_gpus():
    cfg = job(SEED001, nnodes=8, nproc=8)
    assert (cfg.world_size, cfg.dp, cfg.grad_accum, cfg.effective_batch) == (64, 64, 1, 256)
    assert cfg.lr == 2e-4 and cfg.profile is None
    assert cfg.arithmetic[2] == ("per_device_batch 4 x 8 per node x 8 nodes / tp 1 x "
                                 "grad_accum 1 = 256")
    assert cfg.arithmetic[3] == "lr 2e-4 (not scaled: effective batch 256 = lr_tuned_for_batch)"


def test_seed001_16_gpus():
    cfg = job(SEED001, nnodes=2, nproc=8)
    assert (cfg.world_size, cfg.grad_accum, cfg.effective_batch, cfg.profile) == (16, 2, 128, 16)
    assert cfg.lr == pytest.approx(1e-4, rel=1e-12)
    assert cfg.arithmetic[2] == ("per_device_batch 4 x 8 per node x 2 nodes / tp 1 x "
                                 "grad_accum 2 = 128")
    assert cfg.arithmetic[3] == "lr 2e-4 x 128/256 (linear) = 1e-4"
    assert cfg.source["train.grad_accum"] == "profiles.16"
    # the train section holds what to train with; the lr as written stays visible
    assert (cfg.train.lr, cfg.train.grad_accum, cfg.base_lr) == (cfg.lr, 2, 2e-4)
    assert cfg.source["train.lr"] == "scaled from 2e-4, config job.toml"


def test_seed001_example_file_matches_the_seed():
    data = load_file(str(EXAMPLES / "taehv_seed001.toml"))
    for nnodes, effective, lr in ((8, 256, 2e-4), (2, 128, 1e-4)):
        cfg = job(data, nnodes=nnodes, nproc=8)
        assert (cfg.train.per_device_batch, cfg.effective_batch) == (4, effective)
        assert cfg.lr == pytest.approx(lr, rel=1e-12)


@pytest.mark.parametrize("nnodes, grad_accum", [(1, 8), (2, 4), (8, 1)])
def test_keep_effective_batch_across_sizes(nnodes, grad_accum):
    data = {"train": {"per_device_batch": 4, "lr": 2e-4, "lr_tuned_for_batch": 256,
                      "keep_effective_batch": True}}
    cfg = job(data, nnodes=nnodes, nproc=8)
    assert (cfg.grad_accum, cfg.effective_batch, cfg.lr) == (grad_accum, 256, 2e-4)
    assert cfg.source["train.grad_accum"] == "derived (keep_effective_batch)"
    assert cfg.arithmetic[1] == (f"lr_tuned_for_batch 256 / (per_device_batch 4 x dp "
                                 f"{nnodes * 8}) = {grad_accum} (keep_effective_batch)")


def test_keep_effective_batch_warns_about_an_ignored_grad_accum():
    data = {"train": {"per_device_batch": 2, "grad_accum": 3, "effective_batch": 64,
                      "keep_effective_batch": True}}
    cfg = job(data, nnodes=2, nproc=2)
    assert (cfg.grad_accum, cfg.effective_batch) == (8, 64)
    assert any("grad_accum 3" in w and "derives 8" in w for w in cfg.warnings)


@pytest.mark.parametrize("scaling, lr, line", [
    ("linear", 5e-5, "lr 2e-4 x 64/256 (linear) = 5e-5"),
    ("sqrt", 1e-4, "lr 2e-4 x sqrt(64/256) (sqrt) = 1e-4"),
    ("none", 2e-4, "lr 2e-4 (not scaled: lr_scaling none)"),
])
def test_lr_scaling_rules(scaling, lr, line):
    data = {"train": {"per_device_batch": 4, "lr": 2e-4, "lr_tuned_for_batch": 256,
                      "lr_scaling": scaling}}
    cfg = job(data, nnodes=2, nproc=8)  # 4 x 16 = 64
    assert cfg.effective_batch == 64
    assert cfg.lr == pytest.approx(lr, rel=1e-12)
    assert cfg.arithmetic[3] == line


def test_no_tuned_batch_means_no_scaling():
    cfg = job({"train": {"lr": 3e-4}}, nnodes=2, nproc=8)
    assert cfg.lr == 3e-4
    assert cfg.arithmetic[3] == "lr 3e-4 (not scaled: no lr_tuned_for_batch)"


def test_tensor_parallel_ranks_share_a_batch():
    cfg = job({"parallel": {"tp": 2}, "train": {"per_device_batch": 4}}, nnodes=2, nproc=2)
    assert (cfg.dp, cfg.effective_batch) == (2, 8)
    assert cfg.arithmetic[0] == "world size 4 / tp 2 = 2"
    assert cfg.arithmetic[2] == ("per_device_batch 4 x 2 per node x 2 nodes / tp 2 x "
                                 "grad_accum 1 = 8")
    assert cfg.warnings == ()


def test_tp_across_nodes_is_a_warning():
    cfg = job({"parallel": {"tp": 4}}, nnodes=2, nproc=2)
    assert cfg.dp == 1
    assert any("cross nodes" in w for w in cfg.warnings)


def test_precision_auto_follows_the_device():
    par = job().parallel
    assert (par.precision("cuda"), par.precision("cpu")) == ("bf16", "fp32")
    assert job(None, ["parallel.mixed_precision=fp32"]).parallel.precision("cuda") == "fp32"


def test_profile_for_another_size_is_still_checked():
    with pytest.raises(UsageError) as err:
        job({"profiles": {"64": {"train": {"grad_acum": 2}}}}, nnodes=2, nproc=2)
    assert err.value.subject == "profiles.64.train.grad_acum"
    assert "train.grad_accum" in err.value.hint


# --- parse_sets and load_file -----------------------------------------------------------------

def test_set_values_are_read_as_toml():
    sets = parse_sets(["train.lr=1e-4", "train.steps=20", "parallel.reshard_after_forward=false",
                       "train.schedule=cosine", 'recipe="mlp-tp"', "train.betas=[0.9, 0.95]",
                       "checkpoint.dir=", "train.steps=30", "model.name=tiny-v2"])
    assert sets == {"train": {"lr": 1e-4, "steps": 30, "schedule": "cosine",
                              "betas": [0.9, 0.95]},
                    "parallel": {"reshard_after_forward": False},
                    "recipe": "mlp-tp", "checkpoint": {"dir": ""},
                    "model": {"name": "tiny-v2"}}


def test_load_file_reads_toml(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('recipe = "mlp-tp"\n[train]\nsteps = 20\n[profiles.16]\n'
                    'train.grad_accum = 2\n')
    assert load_file(str(path)) == {"recipe": "mlp-tp", "train": {"steps": 20},
                                    "profiles": {"16": {"train": {"grad_accum": 2}}}}


def test_load_file_errors_name_config_and_the_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nsteps = 20\nlr = 1e-4 x\n")
    with pytest.raises(UsageError) as err:
        load_file(str(bad))
    assert err.value.subject == "--config" and "line 3" in err.value.line()
    with pytest.raises(UsageError) as err:
        load_file(str(tmp_path / "missing.toml"))
    assert err.value.subject == "--config" and "no such file" in err.value.line()


# --- bad input: one line, the key, a fix ----------------------------------------------------------

# (id, file data, --set items, nnodes, nproc, subject, fragment of the line)
BAD = [
    ("unknown-key-typo", {"train": {"step": 5}}, [], 1, 1, "train.step", "train.steps"),
    ("unknown-key-wrong-section", {"train": {"tp": 2}}, [], 1, 1, "train.tp", "parallel.tp"),
    ("unknown-section", {"trian": {"steps": 5}}, [], 1, 1, "trian", "did you mean train"),
    ("unknown-set-key", None, ["checkpoint.kep=3"], 1, 1, "checkpoint.kep", "checkpoint.keep"),
    ("steps-negative", {"train": {"steps": -5}}, [], 1, 1, "train.steps", "is below 1"),
    ("steps-not-int", None, ["train.steps=abc"], 1, 1, "train.steps", "not a whole number"),
    ("steps-float", {"train": {"steps": 10.0}}, [], 1, 1, "train.steps", "not a whole number"),
    ("lr-string", {"train": {"lr": "fast"}}, [], 1, 1, "train.lr", "is not a number"),
    ("bool-not-string", {"parallel": {"reshard_after_forward": "yes"}}, [], 1, 1,
     "parallel.reshard_after_forward", "true or false"),
    ("bad-schedule", None, ["train.schedule=cosin"], 1, 1, "train.schedule", '"cosine"'),
    ("bad-scaling", {"train": {"lr_scaling": "log"}}, [], 1, 1, "train.lr_scaling", '"sqrt"'),
    ("keep-below-two", {"checkpoint": {"keep": 1}}, [], 1, 1, "checkpoint.keep", "below 2"),
    ("interval-negative", None, ["checkpoint.interval=-1"], 1, 1, "checkpoint.interval",
     "below 0"),
    ("min-lr-ratio-above-one", {"train": {"min_lr_ratio": 1.5}}, [], 1, 1,
     "train.min_lr_ratio", "above 1"),
    ("betas-three", {"train": {"betas": [0.9, 0.99, 0.999]}}, [], 1, 1, "train.betas",
     "two numbers"),
    ("dir-number-from-set", None, ["checkpoint.dir=5"], 1, 1, "checkpoint.dir",
     "quote it"),
    ("section-is-a-value", {"train": 5}, [], 1, 1, "train", "is a table"),
    ("tp-not-dividing", {"parallel": {"tp": 3}}, [], 2, 8, "parallel.tp",
     "16 / 3 = 5.33"),
    ("indivisible-effective-batch", {"train": {"per_device_batch": 4, "effective_batch": 256,
                                               "keep_effective_batch": True}}, [], 3, 8,
     "train.effective_batch", "256 / 96 = 2.67"),
    ("effective-batch-too-small", {"train": {"per_device_batch": 8, "effective_batch": 64,
                                             "keep_effective_batch": True}}, [], 2, 8,
     "train.effective_batch", "64 is smaller than per_device_batch 8 x 8 per node x 2 nodes "
     "/ tp 1 = 128"),
    ("keep-without-target", {"train": {"keep_effective_batch": True}}, [], 1, 1,
     "train.effective_batch", "neither"),
    ("effective-batch-without-keep", {"train": {"per_device_batch": 4,
                                                "effective_batch": 256}}, [], 2, 8,
     "train.effective_batch", "grad_accum 1 = 64"),
    ("profile-not-a-size", {"profiles": {"big": {"train": {"steps": 1}}}}, [], 1, 1,
     "profiles.big", "world sizes"),
    ("recipe-in-profile", {"profiles": {"1": {"recipe": "x"}}}, [], 1, 1, "profiles.1.recipe",
     "not allowed inside a profile"),
    ("recipe-not-string", {"recipe": 3}, [], 1, 1, "recipe", "not a recipe name"),
    ("set-without-equals", None, ["train.steps"], 1, 1, "--set", "has no '='"),
    ("set-bad-key", None, ["train..steps=3"], 1, 1, "--set", "not a dotted key"),
    ("set-bad-toml", None, ["train.betas=[0.9,"], 1, 1, "--set train.betas", "not valid TOML"),
    ("set-conflict", None, ["train=5", "train.steps=3"], 1, 1, "--set train.steps",
     "already set"),
    ("model-unknown-for-recipe", {"model": {"hiden": 3}}, [], 1, 1, "model.hiden",
     "model.hidden"),
    ("model-wrong-type", {"model": {"hidden": "wide"}}, [], 1, 1, "model.hidden",
     "not a whole number"),
]


@pytest.mark.parametrize("file_data, sets, nnodes, nproc, subject, fragment",
                         [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_input_is_one_line_with_key_and_fix(file_data, sets, nnodes, nproc, subject,
                                                fragment):
    with pytest.raises(UsageError) as err:
        job(file_data, sets, nnodes=nnodes, nproc=nproc, recipe_defaults=RECIPE)
    line = err.value.line()
    assert err.value.exit_code == EXIT_USAGE
    assert err.value.subject == subject
    assert "\n" not in line and line.startswith("meshrun: error: ")
    assert subject in line and "; fix: " in line and err.value.hint
    assert fragment in line, line


def test_indivisible_effective_batch_suggests_what_works():
    with pytest.raises(UsageError) as err:
        job({"train": {"per_device_batch": 4, "effective_batch": 256,
                       "keep_effective_batch": True}}, nnodes=3, nproc=8)
    # 256 / 24 ranks is not whole, so no per-device batch fits; 1, 2, 4 or 8 nodes do
    assert "1 or 2 or 4 or 8 nodes of 8 (per_device_batch 4)" in err.value.hint
    with pytest.raises(UsageError) as err:
        job({"train": {"per_device_batch": 3, "effective_batch": 256,
                       "keep_effective_batch": True}}, nnodes=2, nproc=8)
    assert "train.per_device_batch 2 or 4 at this size" in err.value.hint


def test_tp_error_lists_divisors():
    with pytest.raises(UsageError) as err:
        job(None, ["parallel.tp=3"], nnodes=2, nproc=8)
    assert err.value.hint == "use a tp that divides 16: 1, 2, 4, 8 (within a node) or 16"
    assert "(--set)" in err.value.message


# --- to the workers -----------------------------------------------------------------------------

def test_round_trip_through_dict_json_and_env():
    cfg = job(SEED001, ["train.keep_effective_batch=true", "model.frames=8"], nnodes=2, nproc=8)
    data = json.loads(json.dumps(cfg.to_dict()))
    assert JobConfig.from_dict(data) == cfg
    env = cfg.to_env()
    assert list(env) == [ENV_VAR]
    back = from_env(env)
    assert back == cfg and back.train.betas == (0.9, 0.999)
    assert (back.lr, back.grad_accum, back.effective_batch) == (2e-4, 4, 256)
    assert (data["train"]["grad_accum"], data["grad_accum"]) == (4, 4)
    assert from_env({}) is None


@pytest.mark.parametrize("mangle, fragment", [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: json.dumps(dict(d, version=99)), "version 99"),
    (lambda d: json.dumps({k: v for k, v in d.items() if k != "train"}), "incomplete"),
    (lambda d: json.dumps(dict(d, effective_batch=999)), "effective_batch 999"),
    (lambda d: json.dumps(dict(d, lr=1.0)), "lr 1.0 != train.lr 1e-4"),
], ids=["not-json", "other-version", "missing-section", "inconsistent", "lr-copy-differs"])
def test_from_env_rejects_a_bad_payload(mangle, fragment):
    text = mangle(job(SEED001, nnodes=2, nproc=8).to_dict())
    with pytest.raises(UsageError) as err:
        from_env({ENV_VAR: text})
    assert fragment in err.value.line()


def test_describe_lines_show_values_sources_and_arithmetic():
    lines = job(SEED001, ["train.steps=20"], nnodes=2, nproc=8).describe_lines(width=20)
    text = "\n".join(lines)
    assert all(line.startswith("  ") for line in lines)
    assert len({line.index(" : ") for line in lines}) == 1  # one aligned column
    for fragment in ("train.steps", "(--set)", "profiles.16", "(config job.toml)",
                     "= 128", "lr 2e-4 x 128/256 (linear) = 1e-4", "checkpoints/mr-test"):
        assert fragment in text


# --- the files beside the code ------------------------------------------------------------------

def test_docs_describe_every_key():
    docs = (ROOT / "docs" / "config.md").read_text()
    missing = [key for key in ALL_KEYS if f"`{key}`" not in docs]
    assert missing == []


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_examples_resolve_at_every_profiled_size(path):
    data = load_file(str(path))
    sizes = [int(s) for s in data.get("profiles", {})] or [4]
    for size in sizes:
        nproc = 8 if size % 8 == 0 else size
        cfg = resolve(recipe_defaults=None, file_data=data, sets={}, world_size=size,
                      nproc_per_node=nproc, nnodes=size // nproc, run_id="x",
                      config_path=str(path))
        assert cfg.profile == (size if data.get("profiles") else None)


def test_import_does_not_import_torch():
    done = subprocess.run([sys.executable, "-c", "import meshrun.job, sys; "
                           "assert 'torch' not in sys.modules, 'torch imported'"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# --- a job that shrinks and grows back (--nnodes MIN:MAX) ----------------------------------------

def test_a_smaller_world_keeps_the_effective_batch_and_the_lr_through_accumulation():
    """4 nodes x 2, tp 2: dp 4, 8 per device, effective batch 96 (grad_accum 3). At 3 nodes
    dp is 3 and grad_accum 4; the batch, lr and everything else stay."""
    from meshrun.job.config import elastic

    full = job({"train": {"per_device_batch": 8, "grad_accum": 3, "lr": 1e-3},
                "parallel": {"tp": 2}}, nnodes=4, nproc=2)
    assert (full.dp, full.grad_accum, full.effective_batch) == (4, 3, 96)
    three = elastic(full, 3).at_world(3)
    assert (three.world_size, three.nnodes, three.dp, three.grad_accum) == (6, 3, 3, 4)
    assert three.effective_batch == 96 and three.lr == full.lr and three.min_nnodes == 3
    assert three.arithmetic[-1] == ("at 3 nodes: effective_batch 96 / (per_device_batch 8 x "
                                    "dp 3) = grad_accum 4 (the batch and lr of 4 nodes kept)")
    assert JobConfig.from_dict(three.to_dict()) == three     # travels to the workers whole


def test_a_size_that_cannot_keep_the_batch_is_refused_at_plan_time_with_the_sizes_that_can():
    from meshrun.job.config import elastic

    full = job({"train": {"per_device_batch": 8, "grad_accum": 3}}, nnodes=4, nproc=2)  # 192
    assert elastic(full, 2).min_nnodes == 2   # 3 nodes: 192 / (8 x 6) = 4; 2: 192 / 32 = 6
    odd = job({"train": {"per_device_batch": 8, "grad_accum": 5}}, nnodes=4, nproc=2)   # 320
    with pytest.raises(UsageError) as err:
        elastic(odd, 2)
    assert err.value.code == "elastic-batch"
    assert err.value.message == ("--nnodes 2:4: at 3 nodes the job cannot keep its batch: "
                                 "effective batch 320 / (per_device_batch 8 x dp 6) = 6.67 is "
                                 "not whole")
    assert "sizes that keep effective batch 320: 1, 2, 4 nodes" in err.value.fix


def test_a_worker_of_a_shrunk_job_derives_its_config_from_the_one_meshrun_wrote():
    """MESHRUN_JOB_CONFIG holds the config of the full job (4 nodes); a worker of the job
    shrunk to 3 nodes (WORLD_SIZE 6) derives the 3-node config; one outside MIN..MAX, or of a
    job that may not shrink, is refused as before."""
    from meshrun.job.config import elastic, for_worker

    full = job({"recipe": "mlp-tp", "train": {"per_device_batch": 8, "grad_accum": 3},
                "parallel": {"tp": 2}}, nnodes=4, nproc=2)
    env = elastic(full, 3).to_env()
    got = for_worker("mlp-tp", env, 6, nproc_per_node=2, nnodes=3)
    assert (got.nnodes, got.dp, got.grad_accum, got.effective_batch) == (3, 3, 4, 96)
    with pytest.raises(UsageError) as err:
        for_worker("mlp-tp", env, 4, nproc_per_node=2, nnodes=2)       # below MIN
    assert err.value.code == "job-config-other-world"
    with pytest.raises(UsageError) as err:
        for_worker("mlp-tp", full.to_env(), 6, nproc_per_node=2, nnodes=3)   # not elastic
    assert err.value.code == "job-config-other-world"


def test_from_env_in_a_shrunk_job_gives_the_config_of_its_world():
    from meshrun.job.config import elastic

    full = job({"recipe": "mlp-tp", "train": {"per_device_batch": 8, "grad_accum": 3},
                "parallel": {"tp": 2}}, nnodes=4, nproc=2)
    env = elastic(full, 3).to_env()
    assert from_env({**env, "WORLD_SIZE": "8"}).dp == 4                 # the whole job
    three = from_env({**env, "WORLD_SIZE": "6"})
    assert (three.nnodes, three.dp, three.grad_accum, three.effective_batch) == (3, 3, 4, 96)
    assert from_env({**full.to_env(), "WORLD_SIZE": "6"}).nnodes == 4  # not elastic: as written
