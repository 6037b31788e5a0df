"""meshrun.redact: planted secrets never survive; ordinary names, values and words stay."""

from __future__ import annotations

import json

import pytest

from meshrun.redact import REDACTED, is_secret_name, redact_argv, redact_env, redact_text

# Fake secrets in the shapes real ones have.
HF = "hf_QpRsTuVwXyZaBcDeFgHiJkLmNoPq0123456"
GH = "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwX"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
WANDB = "0123456789abcdef0123456789abcdef01234567"
OPENAI = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz012345"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtZXNocnVuIn0.c2lnbmF0dXJlLXZhbHVl"

PLANTED_ENV = {
    "HF_TOKEN": HF,
    "HUGGING_FACE_HUB_TOKEN": HF,
    "GITHUB_TOKEN": GH,
    "AWS_ACCESS_KEY_ID": AWS_ID,
    "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
    "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEJr//////////wEaDH7example",
    "WANDB_API_KEY": WANDB,
    "OPENAI_API_KEY": OPENAI,
    "MLFLOW_TRACKING_PASSWORD": "hunter2",
    "DB_PASS": "correct horse battery staple",
    "DOCKER_AUTH_CONFIG": '{"auths": {"registry.example.com": {"auth": "dXNlcjpwYXNz"}}}',
    "JUPYTER_COOKIE_SECRET": "c0ffee",
    "apiKey": "abc123-camel",
    "DATABASE_URL": "postgres://trainer:pg-s3cret@db.internal:5432/runs",
    "PIP_INDEX_URL": "https://__token__:pypi-AgEIcHlwaS5vcmcCJGE@pypi.example.com/simple",
    "CI_REMOTE": f"https://{GH}@github.com/org/repo.git",
    "TRAIN_ARGS": "--lr 3e-4 --hf-token " + HF,
}
SECRETS = [HF, GH, AWS_ID, AWS_SECRET, "FwoGZXIvYXdzEJr", WANDB, OPENAI, "hunter2",
           "correct horse battery staple", "dXNlcjpwYXNz", "c0ffee", "abc123-camel", "pg-s3cret",
           "pypi-AgEIcHlwaS5vcmcCJGE"]

ORDINARY_ENV = {
    "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "16", "RANK": "3",
    "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0,mlx5_1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_NCCL_BLOCKING_WAIT": "0",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TOKENIZERS_PARALLELISM": "false",
    "MAX_TOKENS": "4096", "KEYBOARD_LAYOUT": "us", "MONKEY": "banana", "PWD": "/home/ml/job",
    "HF_HOME": "/scratch/hf", "HF_TOKEN_PATH": "/home/ml/.cache/huggingface/token",
    "SSH_AUTH_SOCK": "/tmp/ssh-XXXX/agent.1", "XDG_SESSION_TYPE": "tty",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "PYTHONHASHSEED": "0",
    "MESHRUN_RUN_ID": "slurm-48213.0", "GIT_COMMIT": "3f2a9c1e5b7d90a4c6e8f0b2d4a6c8e0f1a3b5c7",
}


def test_planted_env_secrets_do_not_survive():
    out = redact_env({**PLANTED_ENV, **ORDINARY_ENV})
    dumped = json.dumps(out)
    for secret in SECRETS:
        assert secret not in dumped, secret
    assert set(out) == set(PLANTED_ENV) | set(ORDINARY_ENV)  # names are kept
    assert out["HF_TOKEN"] == REDACTED and out["WANDB_API_KEY"] == REDACTED
    # a URL keeps everything but its credentials
    assert out["DATABASE_URL"] == "postgres://trainer:<redacted>@db.internal:5432/runs"
    assert out["CI_REMOTE"] == "https://<redacted>@github.com/org/repo.git"
    assert out["TRAIN_ARGS"] == "--lr 3e-4 --hf-token <redacted>"


def test_ordinary_env_is_untouched():
    assert redact_env(ORDINARY_ENV) == ORDINARY_ENV


def test_input_is_not_modified():
    env = dict(PLANTED_ENV)
    redact_env(env)
    assert env == PLANTED_ENV


PLANTED_TEXT = f"""\
$ meshrun run -- train.py --token xyz --password=hunter2 --api-key 'k-123' --lr 3e-4
export HF_TOKEN={HF}
WANDB_API_KEY={WANDB} python train.py
curl -H "Authorization: Bearer {JWT}" https://api.example.com/v1/runs
curl -H "Authorization: Basic dXNlcjpwYXNz" https://registry.example.com
git clone https://oauth2:glpat-AbCdEfGhIjKlMnOpQrSt@gitlab.example.com/ml/job.git
[rank0]: OSError: cannot fetch https://alice:s3cret-pw@hub.example.com/taehv.pt
[rank0]: Namespace(model='taehv', hf_token='{HF}', lr=0.0002)
{{"aws_secret_access_key": "{AWS_SECRET}", "region": "us-east-1"}}
boto3 picked up {AWS_ID} from the environment; openai key {OPENAI}; gh {GH}
-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
-----END OPENSSH PRIVATE KEY-----
"""


def test_planted_text_secrets_do_not_survive():
    out = redact_text(PLANTED_TEXT)
    key_body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
    for secret in (*SECRETS, "xyz", "k-123", JWT, "dXNlcjpwYXNz", "glpat-AbCdEfGhIjKlMnOpQrSt",
                   "s3cret-pw", key_body):
        assert secret not in out, secret
    assert "train.py --token <redacted> --password=<redacted> --api-key '<redacted>' --lr 3e-4" \
        in out
    assert "https://alice:<redacted>@hub.example.com/taehv.pt" in out
    assert "Authorization: Bearer <redacted>" in out
    assert "model='taehv'" in out and "lr=0.0002" in out and '"region": "us-east-1"' in out


@pytest.mark.parametrize("text", [
    "MASTER_PORT=29500 NCCL_IB_GID_INDEX=3 NCCL_SOCKET_IFNAME=ib0 WORLD_SIZE=16",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCH_NCCL_BLOCKING_WAIT=0 TORCH_NCCL_DUMP_ON_TIMEOUT=1",
    "the monkey typed on a keyboard while the turkey watched",
    "generate(max_tokens=512, max_new_tokens=128) with pad_token='<pad>' eos_token='</s>'",
    ("torch.distributed.DistStoreError: Timed out initializing process group in store based "
     "barrier on rank 3, for key: store_based_barrier_key:1 (world_size=8, worker_count=4)"),
    "KeyError: 'video' while reading key frames; session 4 of 10; auth handshake ok",
    "Bearer authentication is used by the hub; the token budget is 4096",
    "commit 3f2a9c1e5b7d90a4c6e8f0b2d4a6c8e0f1a3b5c7, wandb run 0123456789abcdef",
    "https://download.pytorch.org/whl/cu124 and git@github.com:org/repo.git",
    "meshrun run --master-port 29500 --nnodes 2 -- train.py --config cfg.toml --lr 3e-4",
])
def test_ordinary_text_is_untouched(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("name, secret", [
    ("HF_TOKEN", True), ("GITHUB_TOKEN", True), ("WANDB_API_KEY", True), ("apiKey", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("AWS_SESSION_TOKEN", True), ("DB_PASSWORD", True),
    ("MYSQL_PASSWD", True), ("DB_PASS", True), ("GOOGLE_APPLICATION_CREDENTIALS", True),
    ("DOCKER_AUTH_CONFIG", True), ("JUPYTER_COOKIE_SECRET", True), ("SENTRY_DSN", True),
    ("--hf-token", True), ("--password", True), ("--api-key", True), ("session_cookie", True),
    ("MASTER_PORT", False), ("NCCL_IB_GID_INDEX", False), ("MONKEY", False),
    ("KEYBOARD", False), ("TORCH_NCCL_ASYNC_ERROR_HANDLING", False),
    ("TOKENIZERS_PARALLELISM", False), ("MAX_TOKENS", False), ("pad_token", False),
    ("HF_TOKEN_PATH", False), ("SSH_AUTH_SOCK", False), ("PWD", False), ("BYPASS", False),
    ("--max-tokens", False), ("AWS_ACCESS_KEY_ID", False),
])
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_secret_keys_inside_an_ordinary_value():
    # the name is harmless, the JSON in it is not
    out = redact_env({"REGISTRY_SETTINGS": PLANTED_ENV["DOCKER_AUTH_CONFIG"]})
    assert out["REGISTRY_SETTINGS"] == \
        '{"auths": {"registry.example.com": {"auth": "<redacted>"}}}'


def test_argv():
    argv = ["train.py", "--token", "xyz", "--api-key=abc", "--lr", "3e-4",
            "--resume=https://u:p4ss@s3.example.com/ckpt", "--password", "-", "--max-tokens",
            "512"]
    assert redact_argv(argv) == [
        "train.py", "--token", REDACTED, f"--api-key={REDACTED}", "--lr", "3e-4",
        f"--resume=https://u:{REDACTED}@s3.example.com/ckpt", "--password", "-", "--max-tokens",
        "512"]


def test_idempotent():
    once = redact_text(PLANTED_TEXT)
    assert redact_text(once) == once
    env = redact_env(PLANTED_ENV)
    assert redact_env(env) == env


# Secrets whose names the first policy missed: glued (PGPASSWORD, SSHPASS), abbreviated
# (MYSQL_PWD) or a personal access token (GH_PAT). The value has no recognisable shape,
# so only the name can give it away.
NAMED_SECRETS = ["PGPASSWORD", "MYSQL_PWD", "SSHPASS", "GH_PAT", "GITHUB_PAT",
                 "AZURE_DEVOPS_EXT_PAT", "ghPat", "sshPass", "DB_PWD", "RSYNC_PASSWORD",
                 "LDAPPASS", "NPMTOKEN", "OAUTHCLIENTSECRET", "HTTP_AUTHORIZATION",
                 "VAULT_PASSCODE", "SIGNING_PASSKEY"]
PLAIN_SECRET = "s3cr3t-Value_42"


@pytest.mark.parametrize("name", NAMED_SECRETS)
def test_named_secret_in_env(name):
    out = redact_env({name: PLAIN_SECRET, "MASTER_PORT": "29500"})
    assert out == {name: REDACTED, "MASTER_PORT": "29500"}


@pytest.mark.parametrize("template", [
    "export {name}={value}",
    "{name}={value} psql -h db.internal -U trainer",
    "env {name}='{value}' ssh host-b",
    '{{"{name}": "{value}", "MASTER_PORT": "29500"}}',
])
@pytest.mark.parametrize("name", NAMED_SECRETS)
def test_named_secret_in_text(name, template):
    text = template.format(name=name, value=PLAIN_SECRET)
    out = redact_text(text)
    assert PLAIN_SECRET not in out
    assert name in out and REDACTED in out
    assert redact_text(out) == out


# Names that contain a secret-looking word but hold nothing secret; they must stay
# readable in env dumps and logs (a bug report needs them).
HARMLESS_ENV = {
    "PWD": "/home/ml/job", "OLDPWD": "/home/ml", "OLD_PWD": "/home/ml", "PATH": "/usr/bin:/bin",
    "KEYBOARD": "us", "KEYBOARD_LAYOUT": "de", "NCCL_IB_PKEY": "0", "UCX_IB_PKEY": "0x8001",
    "PASSTHROUGH": "1", "PASS_THROUGH": "1", "GPU_PASSTHROUGH": "vfio",
    "BACKWARD_PASS": "fused", "BYPASS": "0", "COMPASS": "north",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3", "MASTER_PORT": "29500", "MASTER_ADDR": "10.0.0.1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "TORCH_NCCL_BLOCKING_WAIT": "1",
    "TORCHELASTIC_RUN_ID": "abc123", "PGPASSFILE": "/home/ml/.pgpass",
    "PGPASSWORD_FILE": "/run/secrets/pg", "GH_PAT_FILE": "/run/secrets/gh",
    "PADTOKEN": "<pad>", "PATCH_LEVEL": "3", "PATIENCE": "5", "GIT_AUTHOR_EMAIL": "a@b.c",
    "MONKEY_PATCH": "1",
}


@pytest.mark.parametrize("name, value", sorted(HARMLESS_ENV.items()))
def test_harmless_name_stays_visible(name, value):
    assert is_secret_name(name) is False
    assert redact_env({name: value}) == {name: value}
    for text in (f"export {name}={value}", f"{name}={value} python train.py"):
        assert redact_text(text) == text
