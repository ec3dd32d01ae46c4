"""The rule engine: loading and validating rule files, CEL evaluation, unknown data, evidence holes."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.engine.rules import LISTED_ITEMS, RuleError, evaluate, load_rules, render
from diag.facts import Facts

RULE = """rules:
  - id: TEST-001
    layer: vllm
    severity: warning
    title: Queue building
    scope: vllm_server
    when: vllm_server.metrics.requests_waiting >= settings.queue_waiting_min
    evidence: ["{{{{ vllm_server.metrics.requests_waiting }}}} waiting on {{{{ vllm_server.name }}}}"]
    remediation: "kubectl -n {{{{ vllm_server.namespace }}}} scale deploy/x --replicas=2"
    {extra}
"""


def write_rules(tmp_path: Path, extra: str = "", body: str = RULE) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    (folder / "test.yaml").write_text(body.format(extra=extra))
    return folder


def server(name: str, waiting: float | None) -> dict:
    return {
        "name": name,
        "namespace": "llm",
        "metrics": {"requests_waiting": waiting},
        "_subject": f"vllm/{name}",
        "_links": [f"vllm:{name}"],
    }


def test_fires_only_where_the_condition_holds_and_quotes_values(tmp_path: Path) -> None:
    rules = load_rules([write_rules(tmp_path)])
    facts = Facts(scopes={"vllm_server": [server("a", 7.0), server("b", 0.0)]}, cluster={"sources": {}})
    result = evaluate(rules, facts, {"queue_waiting_min": 1})
    assert [(f.rule, f.subject) for f in result.findings] == [("TEST-001", "vllm/a")]
    assert result.findings[0].evidence == ["7 waiting on a"]
    assert result.findings[0].remediation == "kubectl -n llm scale deploy/x --replicas=2"
    assert result.outcomes["TEST-001"].status == "fired"


def test_null_data_is_unknown_never_healthy(tmp_path: Path) -> None:
    rules = load_rules([write_rules(tmp_path)])
    facts = Facts(scopes={"vllm_server": [server("a", None)]}, cluster={"sources": {}})
    result = evaluate(rules, facts, {"queue_waiting_min": 1})
    assert result.findings == []
    assert result.outcomes["TEST-001"].status == "unknown"


def test_reading_a_field_that_does_not_exist_is_a_rule_error(tmp_path: Path) -> None:
    body = RULE.replace("requests_waiting >=", "no_such_field >=")
    rules = load_rules([write_rules(tmp_path, body=body)])
    facts = Facts(scopes={"vllm_server": [server("a", 3.0)]}, cluster={"sources": {}})
    outcome = evaluate(rules, facts, {"queue_waiting_min": 1}).outcomes["TEST-001"]
    assert outcome.status == "error" and "no_such_field" in outcome.detail


def test_requires_skips_a_rule_whose_sources_were_not_read(tmp_path: Path) -> None:
    rules = load_rules([write_rules(tmp_path, extra="requires: [vllm/]")])
    facts = Facts(scopes={"vllm_server": [server("a", 3.0)]}, cluster={"sources": {"vllm/a.metrics.txt": "failed"}})
    result = evaluate(rules, facts, {"queue_waiting_min": 1})
    assert result.findings == [] and result.outcomes["TEST-001"].status == "skipped"


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (("layer: vllm", "layer: network"), "layer must be one of"),
        (("severity: warning", "severity: loud"), "severity must be one of"),
        (("scope: vllm_server", "scope: galaxy"), "scope must be one of"),
        (("id: TEST-001", "id: test1"), "id must look like"),
        (("when: vllm_server", "when: (vllm_server"), "CEL does not compile"),
        (("    remediation:", "    nope:"), "missing remediation"),
    ],
)
def test_a_bad_rule_file_is_one_line_naming_file_and_rule(
    tmp_path: Path, mutation: tuple[str, str], message: str
) -> None:
    body = RULE.replace(*mutation)
    with pytest.raises(RuleError) as err:
        load_rules([write_rules(tmp_path, body=body)])
    assert str(err.value).startswith("test.yaml:") and message in str(err.value)


def test_explains_must_name_a_known_rule(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="explains unknown rule"):
        load_rules([write_rules(tmp_path, extra="explains: [VLLM-999]")])


def test_render_formats_values_and_marks_unknown_holes() -> None:
    env = {"x": {"f": 0.91234, "n": None, "l": ["a", "b"], "i": 3.0}}
    assert render("{{ x.f }} | {{ x.n }} | {{ x.l }} | {{ x.i }} | {{ x.missing }}", env) == "0.912 | ? | a, b | 3 | ?"


def test_render_shows_the_first_items_of_a_long_list_and_counts_the_rest() -> None:
    """A pending pod in a fleet lists every node; the evidence line stays a line."""
    nodes = [f"gpu-{i}: 0 of 8 free" for i in range(LISTED_ITEMS + 490)]
    shown = render("{{ pod.nodes }}", {"pod": {"nodes": nodes}})
    assert shown == ", ".join(nodes[:LISTED_ITEMS]) + " and 490 more"
    whole = nodes[:LISTED_ITEMS]
    assert render("{{ pod.nodes }}", {"pod": {"nodes": whole}}) == ", ".join(whole)


def test_render_prints_a_map_in_key_order_whatever_order_cel_returns() -> None:
    """CEL's maps come back in no set order; the same bundle must give the same report each time."""
    drivers = {f"gpu-node-{c}": f"driver {n}" for n, c in enumerate("dbca")}
    assert render("{{ cluster.drivers }}", {"cluster": {"drivers": drivers}}) == (
        "gpu-node-a=driver 3, gpu-node-b=driver 1, gpu-node-c=driver 2, gpu-node-d=driver 0"
    )


SIGNAL_RULES = """rules:
  - id: TEST-002
    layer: vllm
    severity: warning
    title: Out of memory in the log
    scope: vllm_server
    when: size(vllm_server.log_signals.cuda_oom) > 0
    evidence: ["{{{{ vllm_server.log_signals == null ? 'no log' : vllm_server.log_signals.cuda_oom[0] }}}}"]
    remediation: "lower --gpu-memory-utilization"
  - id: TEST-003
    layer: vllm
    severity: warning
    title: A signal no server has
    scope: vllm_server
    when: size(vllm_server.log_signals.no_such_signal) > 0
    evidence: ["x"]
    remediation: "x"
"""


def test_a_map_cut_to_the_keys_rules_read_answers_as_the_whole_one(tmp_path: Path) -> None:
    """Only the keys the rules read of a map go into CEL (a pod's forty signals cost as much as forty
    fields); what a rule reads, a null test of the map and a key no subject has answer as before."""
    rules = load_rules([write_rules(tmp_path, body=SIGNAL_RULES)])
    signals = {f"other_{i}": ["line"] for i in range(40)}
    subjects = [
        {
            "name": "a",
            "log_signals": signals | {"cuda_oom": ["torch.OutOfMemoryError: CUDA out of memory."]},
            "_subject": "vllm/a",
        },
        {"name": "b", "log_signals": signals | {"cuda_oom": []}, "_subject": "vllm/b"},
        {"name": "c", "log_signals": None, "_subject": "vllm/c"},
    ]
    result = evaluate(rules, Facts(scopes={"vllm_server": subjects}, cluster={"sources": {}}), {})
    assert [(f.rule, f.subject, f.evidence) for f in result.findings] == [
        ("TEST-002", "vllm/a", ["torch.OutOfMemoryError: CUDA out of memory."])
    ]
    assert result.outcomes["TEST-002"].detail == "1 of 3; 1 could not be decided"
    assert result.outcomes["TEST-003"].status == "error" and "no_such_signal" in result.outcomes["TEST-003"].detail


def test_a_rules_python_check_is_compiled_at_its_first_use_and_answers_as_compiled(tmp_path: Path) -> None:
    from diag.engine import precheck

    (rule,) = load_rules([write_rules(tmp_path)])
    stub = rule.check
    variables = {"vllm_server": {"metrics": {"requests_waiting": 7}}, "settings": {"queue_waiting_min": 5}}
    assert stub(variables) is True
    assert rule.check is not stub  # compiled once, kept on the rule
    assert rule.check(variables) is precheck.compile_check(rule.when)(variables) is True
