"""A /metrics answer and nvidia-smi's XML are cleaned line by line, each line once per process: the
same as every text rule gives the whole text, and counted every time."""

from collections import Counter
from pathlib import Path

import pytest

from diag.collect.redact import ASSIGNMENT, PRIVATE_KEY, REDACTED, TOKEN_FORMAT, Redactor, redact, redact_text

REPO = Path(__file__).resolve().parents[3]
SCRAPES = sorted(p for p in (REPO / "fixtures").rglob("*.txt") if ".metrics" in p.name or p.parent.name == "dcgm")
SMI_XML = sorted((REPO / "fixtures").rglob("*.xml"))
PLANTED = "hf_" + "plantedExposition0001abcdef"

SECRET_LABELS = f"""# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="16",api_key="{PLANTED}",hf_token="abc123XYZ"}} 1.0
vllm:num_requests_waiting{{model_name="llama",engine="0"}} 3.0 1733500000000
vllm:request_success_total{{finished_reason="stop",model_name="https://user:pw@example.test/m"}} 1.2e+04
vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="llama"}} +Inf
# HELP process_start_time_seconds token={PLANTED}
"""


def test_the_fixtures_scrapes_and_nvidia_smi_files_are_many_and_read_line_by_line() -> None:
    from diag.collect.redact import _redact_lines

    for files in (SCRAPES, SMI_XML):
        by_lines = [p for p in files if _redact_lines(p.read_text(errors="surrogateescape"), Counter()) is not None]
        assert len(files) >= 20 and len(by_lines) >= 0.9 * len(files)


@pytest.mark.parametrize("path", SCRAPES + SMI_XML, ids=lambda p: str(p.relative_to(REPO)))
def test_a_scrape_or_an_nvidia_smi_file_is_cleaned_as_the_text_rules_clean_it_whole(path: Path) -> None:
    raw = path.read_bytes()
    whole: Counter[str] = Counter()
    expected = redact_text(raw.decode("utf-8", "surrogateescape"), whole).encode("utf-8", "surrogateescape")
    redactor = Redactor()
    assert redactor(f"gpu/{path.name}", raw) == expected
    assert +redactor.applied == +whole


def test_secrets_in_label_values_and_help_text_are_redacted_and_values_kept() -> None:
    out = redact("vllm/a.metrics.txt", SECRET_LABELS.encode()).decode()
    assert PLANTED not in out and "abc123XYZ" not in out and ":pw@" not in out
    assert out == redact_text(SECRET_LABELS)
    assert f'hf_token="{REDACTED}"' in out or f"hf_token={REDACTED}" in out
    for value in (" 1.0\n", " 3.0 1733500000000\n", " 1.2e+04\n", " +Inf\n"):
        assert value in out


def test_every_scrape_counts_what_it_cleaned_though_its_lines_were_cleaned_before() -> None:
    redactor = Redactor()
    redactor("vllm/a.metrics.txt", SECRET_LABELS.encode())
    once = Counter(redactor.applied)
    assert once[TOKEN_FORMAT] >= 1 and once[ASSIGNMENT] >= 1
    redactor("vllm/a.metrics.1.txt", SECRET_LABELS.encode())
    assert redactor.applied == once + once


@pytest.mark.parametrize(
    "tail",
    [
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAplanted\nmorelines\n-----END RSA PRIVATE KEY-----\n",
        "password: |\n  planted-block-secret\n",
        'vllm:x{a="b"} 1 # {trace_id="planted"} 0.5\n',  # an exemplar: OpenMetrics, not the plain format
        "# -----BEGIN RSA PRIVATE KEY-----\n# MIIEowIBAAKCAQEAplanted\n# -----END RSA PRIVATE KEY-----\n",
        "a line of a log\n",
        "<a>\n  first line of a text\n  second line of it\n</a>\n",  # a text on two lines
    ],
)
def test_an_answer_with_a_line_of_another_format_is_cleaned_whole(tail: str) -> None:
    text = SECRET_LABELS + tail
    out = redact("vllm/a.metrics.txt", text.encode()).decode()
    assert out == redact_text(text)
    assert PLANTED not in out


def test_a_key_block_under_series_lines_is_still_redacted() -> None:
    text = SECRET_LABELS + "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
    redactor = Redactor()
    out = redactor("vllm/a.metrics.txt", text.encode()).decode()
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" not in out
    assert redactor.applied[PRIVATE_KEY] == 1


SMI = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">
<nvidia_smi_log>
\t<timestamp>Wed Dec  2 18:13:02 2026</timestamp>
\t<gpu id="00000000:00:06.0">
\t\t<product_name>NVIDIA H200</product_name>
\t\t<serial>hf_plantedSmiXml0001abcdefghij</serial>
\t\t<processes>
\t\t\t<process_info>
\t\t\t\t<process_name>python -m vllm --api-key sk-plantedSmiXml0002abcdefghij</process_name>
\t\t\t</process_info>
\t\t</processes>
\t\t<empty/>
\t\t<mig_devices>
\t\t\tNone
\t\t</mig_devices>
\t</gpu>
</nvidia_smi_log>
"""


def test_nvidia_smi_xml_is_cleaned_line_by_line_as_whole() -> None:
    from diag.collect.redact import _redact_lines

    found: Counter[str] = Counter()
    out = _redact_lines(SMI, found)
    assert out is not None and out == redact_text(SMI)
    assert "hf_planted" not in out and "sk-planted" not in out and "<product_name>NVIDIA H200</product_name>" in out
    assert found[TOKEN_FORMAT] >= 1
