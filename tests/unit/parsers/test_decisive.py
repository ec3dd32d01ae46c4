from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.parsers.decisive import TAIL_BYTES, FamilyTableError, decisive_line, load_table

VLLM = "/usr/local/lib/python3.12/dist-packages/vllm"


def test_the_last_exception_of_a_traceback_with_its_frames_and_their_layer() -> None:
    log = f"""INFO 12-01 14:13:07 [__init__.py:241] Automatically detected platform cuda.
Traceback (most recent call last):
  File "{VLLM}/v1/structured_output/backend_xgrammar.py", line 92, in compile_grammar
    ctx = self.compiler.compile_json_schema(
          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/dist-packages/xgrammar/compiler.py", line 191, in compile_json_schema
    self._handle.compile_json_schema(
RuntimeError: [06:33:23] /project/cpp/json_schema_converter.cc:2181: items must be a boolean or an object
"""
    found = decisive_line(log)
    assert found is not None
    assert (
        found.line
        == "RuntimeError: [06:33:23] /project/cpp/json_schema_converter.cc:2181: items must be a boolean or an object"
    )
    assert (found.kind, found.exception) == ("last exception", "RuntimeError")
    assert found.frames == [
        f"{VLLM}/v1/structured_output/backend_xgrammar.py",
        "/usr/local/lib/python3.12/dist-packages/xgrammar/compiler.py",
    ]
    # xgrammar is no row of the table: the innermost frame it knows is vLLM's
    assert (found.origin, found.layer, found.placed_by, found.family) == ("vllm", "vllm", "frames", None)


def test_a_wrapper_that_points_above_is_passed_over_for_the_exception_it_wraps() -> None:
    log = f"""Traceback (most recent call last):
  File "{VLLM}/v1/worker/block_table.py", line 27, in __init__
    self.block_table = torch.zeros(
RuntimeError: CUDA error: no kernel image is available for execution on the device

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "{VLLM}/v1/engine/core_client.py", line 846, in get_output_async
    raise self._format_exception(outputs) from None
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""
    found = decisive_line(log)
    assert found is not None
    assert found.line == "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    # the family decides where it is fixed, whatever raised it
    assert (found.family, found.layer, found.placed_by) == ("gpu_arch_unsupported", "vllm", "family")


def test_during_handling_the_last_exception_of_the_chain_is_the_cause() -> None:
    log = """Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/huggingface_hub/file_download.py", line 1111, in _hf_hub_download_to_cache_dir
    os.makedirs(os.path.dirname(blob_path), exist_ok=True)
  File "<frozen os>", line 225, in makedirs
PermissionError: [Errno 13] Permission denied: '/.cache'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/transformers/utils/hub.py", line 527, in cached_files
    raise OSError(
OSError: PermissionError at /.cache when downloading meta-llama/Llama-3.3-70B-Instruct. Check cache directory permissions.
"""  # noqa: E501 - a log as printed
    found = decisive_line(log)
    assert found is not None
    assert found.line.startswith("OSError: PermissionError at /.cache when downloading")
    assert (found.family, found.layer) == ("permission_denied", "kubernetes")


def test_prefixes_of_vllm_kubectl_and_torchrun_are_read_through() -> None:
    prefix = "2026-12-01T14:12:48.123456789Z (VllmWorker TP2 pid=391) ERROR 12-01 14:12:48 [multiproc_executor.py:596] "
    log = (
        "".join(
            prefix + line + "\n"
            for line in [
                "WorkerProc hit an exception.",
                "Traceback (most recent call last):",
                f'  File "{VLLM}/distributed/parallel_state.py", line 353, in all_reduce',
                "    return torch.ops.vllm.all_reduce(input_,",
                "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
                "CUDA kernel errors might be asynchronously reported at some "
                "other API call, so the stacktrace below might be incorrect.",
            ]
        )
        + "[rank0]: RuntimeError: Worker failed with error 'CUDA error: "
        "uncorrectable NVLink error detected during the execution\n"
    )
    found = decisive_line(log)
    assert found is not None
    assert found.line == "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution"
    assert (found.family, found.layer) == ("nvlink_error", "gpu")


def test_escape_codes_are_dropped_before_reading() -> None:
    log = "\x1b[31mERROR\x1b[0m 12-01 14:13:07 [api_server.py:1] \x1b[1mboom: the server could not start\x1b[0m\n"
    found = decisive_line(log)
    assert found is not None
    assert found.line == "ERROR boom: the server could not start"
    assert "\x1b" not in found.line


def test_a_go_panic_is_the_line_before_its_goroutines() -> None:
    log = """I1201 13:52:07.514284       1 main.go:238] Starting FS watcher for /var/lib/kubelet/device-plugins
E1201 13:52:07.516102       1 factory.go:113] Incompatible strategy detected auto
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x1a2b3c4]

goroutine 1 [running]:
github.com/NVIDIA/k8s-device-plugin/internal/rm.(*nvmlResourceManager).getDevices(0x0)
\t/build/internal/rm/nvml_manager.go:84 +0x24
"""
    found = decisive_line(log)
    assert found is not None
    assert (found.kind, found.line) == (
        "panic",
        "panic: runtime error: invalid memory address or nil pointer dereference",
    )
    assert found.frames == ["/build/internal/rm/nvml_manager.go"]


def test_a_fatal_line_comes_before_a_later_error_line() -> None:
    log = """F1201 13:52:07.527431       1 main.go:185] failed to start plugins: unable to load NVML
E1201 13:52:07.527500       1 main.go:190] shutting down
"""
    found = decisive_line(log)
    assert found is not None
    assert (found.kind, found.line) == (
        "last fatal line",
        "F1201 13:52:07.527431       1 main.go:185] failed to start plugins: unable to load NVML",
    )


def test_the_last_error_line_when_nothing_else_is_there() -> None:
    found = decisive_line(
        "usage: vllm serve [model_tag] [options]\n"
        "vllm serve: error: unrecognized arguments: --max-num-batch-tokens 16384\n"
    )
    assert found is not None
    assert (found.kind, found.family, found.layer) == ("last error line", "argument_refused", None)
    assert found.line == "vllm serve: error: unrecognized arguments: --max-num-batch-tokens 16384"


def test_lines_that_only_point_elsewhere_are_never_decisive() -> None:
    log = (
        "ERROR 12-01 14:13:31 [core.py:632] EngineCore failed to start.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    found = decisive_line(log)
    assert found is not None
    assert found.line == "ERROR EngineCore failed to start."


def test_another_process_writing_into_a_traceback_does_not_end_it() -> None:
    log = f"""Traceback (most recent call last):
  File "{VLLM}/v1/structured_output/backend_xgrammar.py", line 92, in compile_grammar
nanobind: leaked 1 instances!
WARNING: something else logged meanwhile
  File "/usr/local/lib/python3.12/dist-packages/xgrammar/compiler.py", line 191, in compile_json_schema
RuntimeError: items must be a boolean or an object
"""
    found = decisive_line(log)
    assert found is not None
    assert found.line == "RuntimeError: items must be a boolean or an object"
    assert len(found.frames) == 2


def test_a_tail_cut_inside_a_traceback_still_has_its_exception() -> None:
    log = f'''    self.model_runner = GPUModelRunner(
  File "{VLLM}/v1/worker/block_table.py", line 27, in __init__
    self.block_table = torch.zeros(
RuntimeError: CUDA error: no kernel image is available for execution on the device
'''
    found = decisive_line(log)
    assert found is not None
    assert found.exception == "RuntimeError"
    assert found.frames == [f"{VLLM}/v1/worker/block_table.py"]


def test_only_the_tail_of_a_long_log_is_read() -> None:
    early = 'Traceback (most recent call last):\n  File "/x/vllm/a.py", line 1, in f\nValueError: long ago\n'
    filler = "INFO 12-01 14:13:07 [loggers.py:123] Engine 000: Avg prompt throughput: 781.0 tokens/s\n" * (
        TAIL_BYTES // 60
    )
    assert decisive_line(early + filler) is None  # what lies before the tail is not read
    found = decisive_line(early + filler + "ERROR 12-01 14:20:00 [api_server.py:1] the end\n")
    assert found is not None and found.line == "ERROR the end"


def test_a_log_with_no_error_has_no_decisive_line() -> None:
    assert decisive_line("INFO 12-01 14:13:07 [__init__.py:241] Automatically detected platform cuda.\n") is None
    assert decisive_line("") is None
    assert decisive_line(None) is None


def test_a_long_message_is_cut() -> None:
    found = decisive_line("ValueError: " + "x" * 5000 + "\n")
    assert found is None  # a bare exception line without a traceback is no traceback
    found = decisive_line(
        'Traceback (most recent call last):\n  File "/a/b.py", line 1, in f\nValueError: ' + "x" * 5000 + "\n"
    )
    assert found is not None and len(found.line) == 400


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "families:\n  f:\n    description: d\n    fix: x\n    layer: network\n"
            "    patterns: [{regex: a, source: s, example: a}]\n",
            "layer must be one of",
        ),
        (
            "families:\n  f:\n    description: d\n    fix: x\n    patterns: [{regex: a, source: s, example: b}]\n",
            "needs an `example` its regex matches",
        ),
        (
            "families:\n  f:\n    description: d\n    fix: x\n    patterns: [{regex: a, example: a}]\n",
            "needs a `source`",
        ),
        (
            "families:\n  f:\n    description: d\n    patterns: [{regex: a, source: s, example: a}]\n",
            "needs a description and a fix",
        ),
        ("origins:\n  - {match: '(', layer: vllm}\n", "does not compile"),
    ],
)
def test_a_wrong_family_table_is_one_line_naming_the_entry(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "families.yaml"
    path.write_text(text)
    with pytest.raises(FamilyTableError, match=says):
        load_table(path)


def test_every_family_example_is_placed_in_its_own_family() -> None:
    """Families are tried in file order: an example an earlier family's pattern catches is misplaced."""
    from diag.parsers.decisive import builtin_table

    for family in builtin_table().families:
        for example in family.examples:
            found = decisive_line(f"ERROR 12-01 14:13:07 [x.py:1] {example}\n")
            assert found is not None and found.family == family.name, (family.name, example)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(
        st.sampled_from(
            [
                "Traceback (most recent call last):",
                '  File "/x/vllm/a.py", line 1, in f',
                "    raise ValueError(x)",
                "ValueError: boom",
                "The above exception was the direct cause of the following exception:",
                "panic: oops",
                "goroutine 1 [running]:",
                "\t/src/main.go:12 +0x1",
                "E1201 13:52:07.527431       1 main.go:185] failed",
                "(EngineCore_DP0 pid=1) ERROR 12-09 06:33:23 [core.py:710] ",
                "\x1b[31m",
                "",
                "INFO fine",
            ]
        )
        | st.text(max_size=40),
        max_size=40,
    )
)
def test_any_arrangement_of_log_lines_reads_without_raising(lines: list[str]) -> None:
    found = decisive_line("\n".join(lines))
    assert found is None or 0 < len(found.line) <= 400  # report/safe.py makes what it quotes safe to show
