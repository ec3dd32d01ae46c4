"""`triage` compiles the rules while it collects (diag.analyze.compile_rules): a rule file that is
wrong is still reported by the analysis, as one line, not lost in that thread."""

from pathlib import Path

import pytest

from diag.analyze import analyze_bundle, compile_rules
from diag.bundle.files import Bundle
from diag.engine.rules import RuleError

DEMO = Path(__file__).parents[2] / "fixtures" / "healthy-k8s-vllm"


def test_a_wrong_rule_file_is_left_for_the_analysis_to_report(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("rules: [{id: nope}]\n")
    compile_rules([tmp_path])  # raises nothing
    with pytest.raises(RuleError, match="bad.yaml"):
        analyze_bundle(Bundle.open(DEMO), extra_rule_dirs=[tmp_path])
