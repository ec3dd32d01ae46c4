"""vLLM engine arguments from a container's command and args.

Recognised launches: `vllm serve MODEL ...`, `python[3] -m vllm.entrypoints.openai.api_server --model M ...`
(and `-m vllm.entrypoints.cli.main serve`), the argv split anywhere between `command` and `args`, and
the same inside `sh -c "<script>"` (env assignments, `exec`, `&&`, `;`, redirections). Flags are read
the way vLLM's FlexibleArgumentParser reads them: `--flag value` or `--flag=value`, underscores or
dashes, the short aliases (-tp, -pp, -dp, ...), `--no-<flag>` for booleans.

Arguments handed to an entrypoint not in sight (a custom image's, or a wrapper script) are read the same
way by `parse_entrypoint_args`, into EngineArgs that know only the flags given (`complete` false).
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from diag.snapshot.model import EngineArgs

REDACTED = "<redacted>"

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh"})
_WRAPPERS = frozenset({"exec", "env", "nohup"})  # run the rest of the line as the command
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "-Q"})
_OPENAI_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_CLI_MODULE = "vllm.entrypoints.cli.main"
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATOR_CHARS = frozenset(";&|\n")
_GROUPING_CHARS = frozenset("(){}")
_REDIRECT_CHARS = frozenset("<>&|")
_FD_BEFORE_REDIRECT = re.compile(r"(?<![^\s;&|])\d+(?=[<>])")  # the "2" of 2>&1, outside words

# vLLM's single-dash aliases (vllm/engine/arg_utils.py, entrypoints/openai/cli_args.py).
_ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-dpl": "--data-parallel-size-local",
    "-dpa": "--data-parallel-address",
    "-dpp": "--data-parallel-rpc-port",
    "-dpb": "--data-parallel-backend",
    "-dpn": "--data-parallel-rank",
    "-dpr": "--data-parallel-start-rank",
    "-dph": "--data-parallel-hybrid-lb",
    "-dpe": "--data-parallel-external-lb",
    "-dcp": "--decode-context-parallel-size",
    "-pcp": "--prefill-context-parallel-size",
    "-ep": "--enable-expert-parallel",
    "-asc": "--api-server-count",
    "-q": "--quantization",
    "-O": "--compilation-config",
}

# Flags that take no value (store_true, or BooleanOptionalAction: these also have a --no- form).
# Needed to tell `--flag MODEL` (a boolean, then the positional model) from `--flag VALUE`.
_BOOLEAN_FLAGS = frozenset(
    {
        "--allow-credentials",
        "--async-scheduling",
        "--calculate-kv-scales",
        "--data-parallel-external-lb",
        "--data-parallel-hybrid-lb",
        "--disable-async-output-proc",
        "--disable-cascade-attn",
        "--disable-chunked-mm-input",
        "--disable-custom-all-reduce",
        "--disable-fastapi-docs",
        "--disable-frontend-multiprocessing",
        "--disable-hybrid-kv-cache-manager",
        "--disable-log-requests",
        "--disable-log-stats",
        "--disable-mm-preprocessor-cache",
        "--disable-sliding-window",
        "--disable-uvicorn-access-log",
        "--enable-auto-tool-choice",
        "--enable-chunked-prefill",
        "--enable-dbo",
        "--enable-eplb",
        "--enable-expert-parallel",
        "--enable-force-include-usage",
        "--enable-log-outputs",
        "--enable-log-requests",
        "--enable-lora",
        "--enable-lora-bias",
        "--enable-prefix-caching",
        "--enable-prompt-adapter",
        "--enable-prompt-tokens-details",
        "--enable-reasoning",
        "--enable-request-id-headers",
        "--enable-server-load-tracking",
        "--enable-sleep-mode",
        "--enable-ssl-refresh",
        "--enable-tokenizer-info-endpoint",
        "--enforce-eager",
        "--exclude-tools-when-tool-choice-none",
        "--fully-sharded-loras",
        "--grpc",
        "--headless",
        "--log-error-stack",
        "--multi-step-stream-outputs",
        "--ray-workers-use-nsight",
        "--return-tokens-as-token-ids",
        "--skip-tokenizer-init",
        "--tokens-only",
        "--trust-remote-code",
        "--trust-request-chat-template",
        "--use-v2-block-manager",
    }
)
# Older vLLM (StoreBoolean) also read an optional true/false after these.
_OPTIONAL_VALUE_BOOLEANS = frozenset({"--enable-chunked-prefill"})
# nargs="+": every following word up to the next flag is a value.
_MULTI_VALUE_FLAGS = frozenset(
    {
        "--api-key",
        "--served-model-name",
        "--lora-modules",
        "--prompt-adapters",
        "--allowed-origins",
        "--allowed-methods",
        "--allowed-headers",
    }
)
_SECRET_WORD_ENDINGS = ("key", "token", "secret", "password", "passwd")


@dataclass
class _Flag:
    name: str  # canonical: --long-name, dashes
    values: list[str] = field(default_factory=list)


@dataclass
class _Launch:
    argv: list[str]  # the vLLM command, from its program name on
    options: list[str]  # what follows the entrypoint
    positional_model: bool  # `vllm serve MODEL`: the first positional is the model


def parse_engine_args(command: list[str], args: list[str], image: str | None = None) -> EngineArgs | None:
    """EngineArgs of a container, or None when it does not run vLLM's OpenAI server. With an empty
    `command` the image's entrypoint runs; for the vllm-openai images (`image` given) that is the server."""
    argv = [*command, *args]
    if not command and image is not None and is_vllm_openai_image(image):
        argv = ["vllm", "serve", *args]
    launch = _find_launch(argv)
    if launch is None:
        return None
    flags, positionals = _read_options(launch.options)
    engine = EngineArgs(raw=_redacted(launch.argv))
    for flag in flags:
        if flag.name not in engine.explicit:
            engine.explicit.append(flag.name)
        _apply(engine, flag)
    if launch.positional_model and positionals:
        engine.model = positionals[0]  # vLLM: the positional model tag wins over --model
    return engine


def parse_entrypoint_args(command: list[str], args: list[str]) -> EngineArgs | None:
    """EngineArgs of the flags handed to an entrypoint that is not vLLM's in sight: with an empty
    `command`, `args` go to the image's ENTRYPOINT; else the first simple command (of the argv, or of
    its `sh -c` script) whose words hold a flag, from that flag on. Only the flags given are known: the
    entrypoint may set others (`complete` false, every field not given None). None when no flag is given
    or the command runs another known server (see `runs_other_server`)."""
    options = _entrypoint_options(tuple(command), tuple(args))
    if options is None:
        return None
    engine = EngineArgs(
        port=None,
        gpu_memory_utilization=None,
        tensor_parallel_size=None,
        pipeline_parallel_size=None,
        data_parallel_size=None,
        raw=_redacted(list(options)),
        complete=False,
    )
    for flag in _read_options(list(options))[0]:
        if flag.name not in engine.explicit:
            engine.explicit.append(flag.name)
        _apply(engine, flag)
    return engine


def entrypoint_flags(command: list[str], args: list[str]) -> frozenset[str]:
    """The canonical names of the flags parse_entrypoint_args reads (empty when it reads none)."""
    return _entrypoint_flags(tuple(command), tuple(args))


@functools.lru_cache(maxsize=4096)
def _entrypoint_flags(command: tuple[str, ...], args: tuple[str, ...]) -> frozenset[str]:
    options = _entrypoint_options(command, args)
    return frozenset(flag.name for flag in _read_options(list(options))[0]) if options else frozenset()


def _entrypoint_options(command: tuple[str, ...], args: tuple[str, ...]) -> tuple[str, ...] | None:
    if runs_other_server(list(command), list(args)):  # with no command, args may be one (an entrypoint's "$@")
        return None
    candidates = simple_commands([*command, *args]) if command else [list(args)]
    for words in candidates:
        first_flag = next((i for i, word in enumerate(words) if _is_flag(word)), None)
        if first_flag is not None:
            return tuple(words[first_flag:])
    return None


# Programs and modules of other servers and of Ray: their flags are theirs, whatever they are named.
_OTHER_PROGRAMS = frozenset(
    {
        "ray",
        "serve",
        "text-generation-launcher",
        "text-generation-server",
        "tritonserver",
        "trtllm-serve",
        "lmdeploy",
        "sglang",
        "aphrodite",
        "ollama",
        "llama-server",
    }
)
_OTHER_PACKAGES = frozenset(
    {"ray", "sglang", "lmdeploy", "tensorrt_llm", "aphrodite", "text_generation_server", "llama_cpp"}
)


def runs_other_server(command: list[str], args: list[str]) -> bool:
    """Whether a simple command of the argv starts Ray or another inference server (SGLang, TGI,
    Triton, TensorRT-LLM, LMDeploy, Aphrodite, Ollama, llama.cpp) rather than vLLM."""
    for words in simple_commands([*command, *args]):
        program = PurePosixPath(words[0]).name
        if program in _OTHER_PROGRAMS:
            return True
        if _PYTHON.match(program) and "-m" in words[1:-1]:
            module = words[words.index("-m", 1) + 1]
            if module.split(".", 1)[0] in _OTHER_PACKAGES:
                return True
    return False


def simple_commands(argv: list[str]) -> list[list[str]]:
    """The commands an argv runs: itself, or the simple commands of its `sh -c` script, each without
    the assignments and wrappers (exec, env, nohup) before its program."""
    if not argv:
        return []
    script = _shell_script(argv)
    commands = [argv] if script is None else _shell_commands(script)
    return [words for words in map(_unwrap, commands) if words]


def launches_vllm(command: list[str], args: list[str]) -> bool:
    """Whether this command line starts vLLM's OpenAI server (parse_engine_args without an image gives
    EngineArgs), read once per distinct command line: a fleet's replicas share theirs."""
    return _launches_vllm(tuple(command), tuple(args))


@functools.lru_cache(maxsize=4096)
def _launches_vllm(command: tuple[str, ...], args: tuple[str, ...]) -> bool:
    return _find_launch([*command, *args]) is not None


def is_vllm_openai_image(image: str) -> bool:
    """vllm/vllm-openai:v0.10.1, registry:5000/mirror/vllm-openai@sha256:..., ..."""
    last_part = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last_part.split(":", 1)[0] == "vllm-openai"


# --------------------------------------------------------------------------- finding the launch


def _find_launch(argv: list[str]) -> _Launch | None:
    if not argv:
        return None
    return next((launch for words in simple_commands(argv) if (launch := _launch_of(words)) is not None), None)


def _shell_script(argv: list[str]) -> str | None:
    """The script of `sh -c SCRIPT` (also -ec, -lc, ...); None when argv is not a shell running one."""
    if PurePosixPath(argv[0]).name not in _SHELLS:
        return None
    i = 1
    while i < len(argv) and argv[i].startswith(("-", "+")):
        word = argv[i]
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            i += 2 if argv[i + 1 : i + 2] == ["--"] else 1  # KubeRay: /bin/bash -lc -- "<script>"
            return argv[i] if i < len(argv) else None
        i += 2 if word in ("-o", "+o", "-O", "+O") else 1
    return None  # a script file, or an interactive shell: the commands are not in the pod spec


def _shell_commands(script: str) -> list[list[str]]:
    """The simple commands of a script, split on && || ; | & and newlines, without redirections."""
    script = _FD_BEFORE_REDIRECT.sub("", script.replace("\\\n", " "))
    lexer = shlex.shlex(script, posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # unbalanced quotes: read what shlex would not
        words = script.split()
    commands: list[list[str]] = [[]]
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
        elif set(word) <= _REDIRECT_CHARS and set(word) & set("<>"):  # a redirection operator: drop it and its target
            skip_next = True
        elif set(word) <= _SEPARATOR_CHARS | _GROUPING_CHARS:  # shlex joins runs of them: "&&", ";\n", "&\n("
            if set(word) & _SEPARATOR_CHARS:
                commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _unwrap(words: list[str]) -> list[str]:
    """Drop what runs before the real program: VAR=value assignments, exec, env, nohup."""
    i = 0
    while i < len(words) and (_ENV_ASSIGNMENT.match(words[i]) or PurePosixPath(words[i]).name in _WRAPPERS):
        i += 1
    return words[i:]


def _launch_of(words: list[str]) -> _Launch | None:
    if not words:
        return None
    program = PurePosixPath(words[0]).name
    if program == "vllm":
        return _Launch(words, words[2:], positional_model=True) if words[1:2] == ["serve"] else None
    if not _PYTHON.match(program):
        return None
    i = 1
    while i < len(words) and words[i] != "-m" and words[i].startswith("-"):
        i += 2 if words[i] in _PYTHON_OPTIONS_WITH_VALUE else 1
    if words[i : i + 1] != ["-m"] or i + 1 >= len(words):
        return None
    module, rest = words[i + 1], words[i + 2 :]
    if module == _OPENAI_SERVER_MODULE:
        return _Launch(words, rest, positional_model=False)
    if module == _CLI_MODULE and rest[:1] == ["serve"]:
        return _Launch(words, rest[1:], positional_model=True)
    return None


# --------------------------------------------------------------------------- reading the flags


def _canonical(name: str) -> str:
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return _ALIASES.get(name, name)


def _is_flag(word: str) -> bool:
    if not word.startswith("-") or len(word) < 2:
        return False
    if word[1] == "-":  # most flags: no float() to try and fail
        return True
    return not _is_number(word)  # "-O3" is a flag, "-1" and "-inf" are values


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _split_flag(word: str) -> tuple[str, str | None]:
    """ "--max_num_seqs=8" -> ("--max-num-seqs", "8"); "-O3" -> ("--compilation-config", "3")."""
    if word.startswith("-O") and not word.startswith("--") and len(word) > 2:
        return _ALIASES["-O"], word[2:].removeprefix("=")
    name, eq, value = word.partition("=")
    return _canonical(name), value if eq else None


def _read_options(options: list[str]) -> tuple[list[_Flag], list[str]]:
    flags: list[_Flag] = []
    positionals: list[str] = []
    i = 0
    while i < len(options):
        word = options[i]
        i += 1
        if word == "--":
            positionals.extend(options[i:])
            break
        if not _is_flag(word):
            positionals.append(word)
            continue
        name, inline = _split_flag(word)
        flag = _Flag(name)
        flags.append(flag)
        if inline is not None:
            flag.values.append(inline)
        elif name in _BOOLEAN_FLAGS or name.startswith("--no-"):
            if name in _OPTIONAL_VALUE_BOOLEANS and i < len(options) and options[i].lower() in ("true", "false"):
                flag.values.append(options[i])
                i += 1
        else:
            while i < len(options) and not _is_flag(options[i]):
                flag.values.append(options[i])
                i += 1
                if name not in _MULTI_VALUE_FLAGS:
                    break
    return flags, positionals


# --------------------------------------------------------------------------- filling EngineArgs


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


_HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT]?)$")
_DECIMAL_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _token_count(text: str) -> int | None:
    """vLLM's human_readable_int: "8192", "32k" (x1000), "32K" (x1024), "25.6k"; "-1"/"auto" mean unset."""
    m = _HUMAN_INT.match(text.strip())
    if m is None:
        return None
    number, suffix = m.groups()
    if suffix in _DECIMAL_SUFFIX:
        return int(float(number) * _DECIMAL_SUFFIX[suffix])
    if "." in number:
        return None
    return int(number) * _BINARY_SUFFIX.get(suffix, 1)


def _bool(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text.lower())


_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--model": ("model", str),
    "--port": ("port", _int),
    "--max-num-seqs": ("max_num_seqs", _int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", _token_count),
    "--gpu-memory-utilization": ("gpu_memory_utilization", _float),
    "--tensor-parallel-size": ("tensor_parallel_size", _int),
    "--pipeline-parallel-size": ("pipeline_parallel_size", _int),
    "--data-parallel-size": ("data_parallel_size", _int),
    "--max-model-len": ("max_model_len", _token_count),
    "--block-size": ("block_size", _int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--distributed-executor-backend": ("distributed_executor_backend", str),
}
_BOOLEAN_FIELDS = {
    "--enable-chunked-prefill": "enable_chunked_prefill",
    "--enable-prefix-caching": "enable_prefix_caching",
}


def _apply(engine: EngineArgs, flag: _Flag) -> None:
    """Set the field a flag names; a value that cannot be read (e.g. "$(TP)") leaves it unknown (None)."""
    if flag.name in _FIELDS:
        attribute, read = _FIELDS[flag.name]
        setattr(engine, attribute, read(flag.values[-1]) if flag.values else None)
    elif flag.name in _BOOLEAN_FIELDS:
        setattr(engine, _BOOLEAN_FIELDS[flag.name], _bool(flag.values[-1]) if flag.values else True)
    elif flag.name.startswith("--no-") and ("--" + flag.name[5:]) in _BOOLEAN_FIELDS:
        setattr(engine, _BOOLEAN_FIELDS["--" + flag.name[5:]], False)


# --------------------------------------------------------------------------- redaction


def _is_secret_flag(word: str) -> bool:
    if not _is_flag(word):
        return False
    name = _split_flag(word)[0].lstrip("-")
    return any(part.endswith(_SECRET_WORD_ENDINGS) for part in name.split("-"))


def _redacted(argv: list[str]) -> list[str]:
    """argv with the values of --api-key and of any flag naming a key, token, secret or password hidden."""
    out: list[str] = []
    hiding = False
    for word in argv:
        if _is_flag(word):
            hiding = _is_secret_flag(word)
            name, eq, value = word.partition("=")
            out.append(f"{name}={REDACTED}" if hiding and eq and value else word)
            hiding = hiding and not eq
        elif hiding:
            out.append(REDACTED)
        else:
            out.append(word)
    return out
