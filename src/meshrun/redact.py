"""Secret redaction for everything meshrun writes into a log bundle. Pure; never imports torch.

A bug report should carry the environment, the command and the logs of a failed
run, but not the tokens, keys and passwords that were lying in them. Three
functions, each returning a new value (the input is never changed):

:func:`redact_env` (a mapping of variables)
    A variable whose **name** says it holds a secret keeps its name and gets the
    value ``<redacted>``. Every other value still goes through
    :func:`redact_text`, so ``GIT_URL=https://user:pass@host/repo`` loses its
    password but keeps the URL.

:func:`redact_text` (a log line, a file, a command line)
    Masks secrets by shape and by context:

    * known token formats: Hugging Face ``hf_...``, GitHub ``ghp_...`` /
      ``github_pat_...``, AWS access key ids ``AKIA...``/``ASIA...``, API keys
      ``sk-...``, Slack ``xox?-...``, Google ``AIza...``, JSON Web Tokens,
      PEM private-key blocks;
    * ``Bearer TOKEN`` and ``Authorization: Basic ...``;
    * credentials in URLs: ``https://user:<redacted>@host`` (a long user part
      with no password, a bare token, is masked whole);
    * a value after a secret-named flag: ``--token X``, ``--hf-token=X``,
      ``--password X``;
    * ``NAME=value`` and ``"NAME": "value"`` pairs whose name is secret-named.

:func:`redact_argv` (a command as a list)
    ``["train.py", "--token", "xyz"]`` -> ``["train.py", "--token", "<redacted>"]``,
    then :func:`redact_text` on every item.

What counts as a secret name
----------------------------
The name is split into words (on ``_``, ``-``, ``.`` and camelCase) and is secret
when

* one word is one of :data:`SECRET_WORDS` (``TOKEN``, ``KEY``, ``SECRET``,
  ``PASSWORD``, ``PASSWD``, ``PASS``, ``PWD``, ``PASSPHRASE``, ``CREDENTIAL(S)``,
  ``CREDS``, ``PAT`` (a personal access token: ``GH_PAT``), ``AUTH``,
  ``AUTHORIZATION``, ``COOKIE``, ``SESSION``, ``SIGNATURE``, ``DSN``, and glued forms
  such as ``APIKEY`` or ``SSHPASS``), or
* one word **ends in** one of :data:`SECRET_SUFFIXES` (``PASSWORD``, ``PASSWD``,
  ``PASSPHRASE``, ``SECRET``, ``TOKEN``, ``CREDENTIAL(S)``): ``PGPASSWORD``,
  ``CLIENTSECRET``, ``NPMTOKEN``. Only these: no harmless word ends in them, while
  words ending in ``KEY`` (``MONKEY``, ``HOTKEY``, ``PKEY``), ``PASS`` (``BYPASS``,
  ``COMPASS``), ``AUTH`` or ``PAT`` are common, so those count only whole or in the
  explicit glued list,

except that

* a final word naming a property rather than the secret (``_ID``, ``_FILE``,
  ``_PATH``, ``_DIR``, ``_URL``, ``_LEN``, ``_SIZE``, ``_TYPE``, ``_TIMEOUT``, ...:
  see :data:`NOT_SECRET_LAST`) clears it: ``HF_TOKEN_PATH`` and
  ``PGPASSWORD_FILE`` point to a secret but are none (their values still pass
  :func:`redact_text`);
* a neighbouring word can say the secret word means something else
  (:data:`_NOT_SECRET_BEFORE`, :data:`_NOT_SECRET_AFTER`): ``TOKEN`` after
  ``PAD``/``EOS``/``BOS``/``MAX``/... is a tokenizer setting (``pad_token``,
  ``max_token``, also glued: ``PADTOKEN``); ``PASS`` after ``FORWARD``/``BACKWARD``/
  ``FIRST``/... or before ``THROUGH``/``THRU`` is a pass, not a password
  (``BACKWARD_PASS``, ``PASS_THROUGH``); ``PWD`` after ``OLD``/``PREV``/``ORIG``/``INIT``
  is a directory;
* a few well-known harmless names (``PWD`` and ``OLDPWD``, the shell's working
  directories; ``SSH_AUTH_SOCK``, ``XDG_SESSION_TYPE``, ...: :data:`HARMLESS_NAMES`).

Whole words only: ``MASTER_PORT``, ``NCCL_IB_GID_INDEX``, ``MONKEY``,
``KEYBOARD``, ``PATH``, ``PASSTHROUGH``, ``CUDA_VISIBLE_DEVICES``,
``TORCH_NCCL_ASYNC_ERROR_HANDLING``, ``TOKENIZERS_PARALLELISM``, ``MAX_TOKENS`` are
not secrets, and text such as "monkey" or "keyboard" is never touched.
``NCCL_IB_PKEY`` (and ``UCX_IB_PKEY``) stays visible on purpose: an InfiniBand
partition key is a 16-bit partition number the fabric manager hands out, not a
credential (knowing it grants nothing), and it is exactly what one needs to see when
nodes cannot reach each other. Bare hex strings (git hashes, 40-hex W&B keys) are not
masked by shape: a W&B key is caught by its name (``WANDB_API_KEY=...``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

REDACTED = "<redacted>"

SECRET_WORDS = frozenset({
    "TOKEN", "KEY", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "PASS", "PWD",
    "PASSPHRASE", "PASSCODE", "CREDENTIAL", "CREDENTIALS", "CREDS", "PAT", "AUTH",
    "AUTHORIZATION", "COOKIE", "COOKIES", "SESSION", "SIGNATURE", "DSN",
    # glued forms seen in the wild (those ending in a SECRET_SUFFIXES word need no entry)
    "APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "PRIVKEY", "AUTHKEY", "PASSKEY",
    "SSHPASS", "DBPASS", "ROOTPASS", "ADMINPASS", "USERPASS", "FTPPASS", "SMTPPASS",
    "LDAPPASS", "DBPWD",
})
# A word ending in one of these is a secret (PGPASSWORD, CLIENTSECRET, NPMTOKEN).
SECRET_SUFFIXES = ("PASSWORD", "PASSWORDS", "PASSWD", "PASSPHRASE", "SECRET", "SECRETS",
                   "TOKEN", "CREDENTIAL", "CREDENTIALS")
NOT_SECRET_LAST = frozenset({
    "ID", "IDS", "FILE", "FILES", "PATH", "DIR", "URL", "URI", "HOST", "PORT", "ENDPOINT",
    "REGION", "NAME", "LEN", "LENGTH", "SIZE", "COUNT", "NUM", "TYPE", "INDEX", "LIMIT",
    "TIMEOUT", "MODE", "ENABLED", "ENABLE", "DISABLE", "DISABLED", "PARALLELISM", "SOCK",
})
_TOKENIZER_WORDS = frozenset({
    "PAD", "EOS", "BOS", "UNK", "SEP", "CLS", "MASK", "SPECIAL", "START", "END", "STOP",
    "MAX", "MIN", "NUM", "NEW", "PER",
})
_NOT_SECRET_BEFORE = {    # secret word -> words before it that give it another meaning
    "TOKEN": _TOKENIZER_WORDS,
    "PASS": frozenset({"BY", "FORWARD", "BACKWARD", "FWD", "BWD", "FIRST", "SECOND", "ONE",
                       "TWO", "SINGLE", "MULTI", "NUM", "PRE", "POST"}),
    "PWD": frozenset({"OLD", "PREV", "ORIG", "INIT"}),
}
_NOT_SECRET_AFTER = {     # secret word -> words after it that give it another meaning
    "PASS": frozenset({"THROUGH", "THRU"}),
}
HARMLESS_NAMES = frozenset({
    "PWD", "OLDPWD",
    "SSH_AUTH_SOCK", "XDG_SESSION_ID", "XDG_SESSION_TYPE", "XDG_SESSION_CLASS",
    "XDG_SESSION_DESKTOP", "DBUS_SESSION_BUS_ADDRESS", "SESSION_MANAGER",
})

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_WORD_SPLIT = re.compile(r"[_\-.\s]+")


def _secret_word(word: str) -> str | None:
    """The secret word ``word`` is or ends in (``PGPASSWORD`` -> ``PASSWORD``), or None."""
    if word in SECRET_WORDS:
        return word
    for suffix in SECRET_SUFFIXES:
        if word.endswith(suffix):
            glued = word[:-len(suffix)]   # PADTOKEN: a tokenizer's word glued to TOKEN
            if suffix == "TOKEN" and glued in _TOKENIZER_WORDS:
                return None
            return suffix
    return None


def is_secret_name(name: str) -> bool:
    """Does a variable, key or flag name say that its value is a secret? (see module doc)"""
    bare = name.strip().lstrip("-")
    if bare.upper() in HARMLESS_NAMES:
        return False
    words = [w for w in _WORD_SPLIT.split(_CAMEL.sub(r"\1_\2", bare).upper()) if w]
    if not words or words[-1] in NOT_SECRET_LAST:
        return False
    for i, word in enumerate(words):
        secret = _secret_word(word)
        if secret is None:
            continue
        if i > 0 and words[i - 1] in _NOT_SECRET_BEFORE.get(secret, ()):
            continue
        if i + 1 < len(words) and words[i + 1] in _NOT_SECRET_AFTER.get(secret, ()):
            continue
        return True
    return False


# --- secrets recognised by their shape --------------------------------------------------------

_SHAPES = [
    re.compile(r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----.*?-----END (?:[A-Z]+ )*PRIVATE KEY-----",
               re.DOTALL),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),                   # Hugging Face
    re.compile(r"\bapi_org_[A-Za-z0-9]{20,}\b"),              # Hugging Face org token
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),            # GitHub
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"),          # GitHub fine-grained
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}\b"),             # GitLab
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),             # AWS access key id
    re.compile(r"\bsk-[A-Za-z0-9_\-]{20,}"),                  # OpenAI / Anthropic style
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),           # Slack
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),                # Google API key
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),  # JWT
]
# "Bearer <token>": the token must look like one (12+ characters with a digit).
_BEARER = re.compile(r"(?i)\b(bearer\s+)(?=[A-Za-z0-9._~+/=\-]*\d)[A-Za-z0-9._~+/=\-]{12,}")
_BASIC = re.compile(r"(?i)(authorization\s*[:=]\s*[\"']?basic\s+)[A-Za-z0-9+/=]{6,}")
_URL_PASSWORD = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://)([^/\s:@]+):([^/\s@]+)@")
_URL_TOKEN_USER = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://)([A-Za-z0-9_\-]{20,})@")

# --- secrets recognised by their name ---------------------------------------------------------

_VALUE = r"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s,;)}\]]+)"
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][A-Za-z0-9_\-]*)(=|\s+)(?!-)(" + _VALUE + ")")
_PAIR = re.compile(r"(?<![\w.\-])([A-Za-z_][A-Za-z0-9_.\-]*)(\s*=\s*)(" + _VALUE + ")")
_QUOTED_KEY = re.compile(r"([\"'])([A-Za-z_][A-Za-z0-9_.\-]*)\1(\s*[:=]\s*)(" + _VALUE + ")")


def _mask_value(value: str) -> str:
    if value[:1] in "\"'" and value[-1:] == value[:1] and len(value) >= 2:
        return value[0] + REDACTED + value[0]
    return REDACTED


def redact_text(text: str) -> str:
    """``text`` with every secret it recognises replaced by ``<redacted>`` (see module doc)."""
    if not text:
        return text
    out = text
    for shape in _SHAPES:
        out = shape.sub(REDACTED, out)
    out = _BEARER.sub(lambda m: m.group(1) + REDACTED, out)
    out = _BASIC.sub(lambda m: m.group(1) + REDACTED, out)
    out = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", out)
    out = _URL_TOKEN_USER.sub(lambda m: f"{m.group(1)}{REDACTED}@", out)
    out = _FLAG.sub(lambda m: (m.group(1) + m.group(2) + _mask_value(m.group(3))
                               if is_secret_name(m.group(1)) else m.group(0)), out)
    out = _PAIR.sub(lambda m: (m.group(1) + m.group(2) + _mask_value(m.group(3))
                               if is_secret_name(m.group(1)) else m.group(0)), out)
    out = _QUOTED_KEY.sub(lambda m: (m.group(0)[:len(m.group(0)) - len(m.group(4))]
                                     + _mask_value(m.group(4))
                                     if is_secret_name(m.group(2)) else m.group(0)), out)
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env``: secret-named variables become ``<redacted>``, the rest pass
    :func:`redact_text`."""
    out: dict[str, str] = {}
    for name, value in env.items():
        value = "" if value is None else str(value)
        out[name] = REDACTED if (value and is_secret_name(name)) else redact_text(value)
    return out


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of a command's argument list with secret flag values masked.

    ``--token xyz`` (two items) masks ``xyz``; ``--token=xyz`` and secrets inside any
    item are handled by :func:`redact_text`.
    """
    out: list[str] = []
    mask_next = False
    for item in argv:
        item = str(item)
        if mask_next and not item.startswith("-"):
            out.append(REDACTED)
            mask_next = False
            continue
        mask_next = item.startswith("-") and "=" not in item and is_secret_name(item)
        out.append(redact_text(item))
    return out
