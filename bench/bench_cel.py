"""Which CEL implementation runs the rule engine: common-expression-language (Rust core) or cel-python.

Compiles every condition in rules/ with both, then evaluates each rule over every subject of its scope
in a large synthetic bundle's facts (N copies of the fixture subjects), and prints compile time,
evaluation time and evaluations per second. Results agree or the bench says where they do not.

    python bench/bench_cel.py [--copies 200] [--fixture fixtures/demo]
"""

from __future__ import annotations

import argparse
import copy
import time
from collections import Counter
from pathlib import Path

from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.rules import load_rules
from diag.facts import build_facts
from diag.link.join import join

ROOT = Path(__file__).resolve().parent.parent


def large_facts(fixtures: list[Path], copies: int):
    merged = None
    for fixture in fixtures:
        facts = build_facts(join(load_bundle(Bundle.open(fixture))))
        if merged is None:
            merged = facts
            continue
        for scope, subjects in facts.scopes.items():
            if scope != "cluster":
                merged.scopes.setdefault(scope, []).extend(subjects)
    for scope, subjects in merged.scopes.items():
        if scope != "cluster":
            merged.scopes[scope] = [copy.deepcopy(s) for _ in range(copies) for s in subjects]
    return merged


def by_scope(rules):
    grouped = {}
    for rule in rules:
        grouped.setdefault(rule.scope, []).append(rule)
    return grouped


def bench_rust(rules, facts, settings):
    """As diag.engine.rules.evaluate does it: one cel.Context per subject, every rule of its scope on it."""
    import cel

    t0 = time.perf_counter()
    programs = {id(r): cel.compile(r.when) for r in rules}
    t1 = time.perf_counter()
    results, n = [], 0
    for scope, scoped in by_scope(rules).items():
        for subject in facts.scopes.get(scope, []):
            env = cel.Context({scope: subject, "cluster": facts.cluster, "settings": settings})
            for rule in scoped:
                n += 1
                try:
                    results.append(programs[id(rule)].execute(env) is True)
                except Exception:  # unknown (null) is a valid outcome here
                    results.append(None)
    return t1 - t0, time.perf_counter() - t1, n, results


def bench_python(rules, facts, settings):
    """The same loop with cel-python: each subject converted once with json_to_cel."""
    import celpy

    env = celpy.Environment()
    t0 = time.perf_counter()
    programs = {id(r): env.program(env.compile(r.when)) for r in rules}
    t1 = time.perf_counter()
    cluster, cfg = celpy.json_to_cel(facts.cluster), celpy.json_to_cel(settings)
    results, n = [], 0
    for scope, scoped in by_scope(rules).items():
        for subject in facts.scopes.get(scope, []):
            activation = {scope: celpy.json_to_cel(subject), "cluster": cluster, "settings": cfg}
            for rule in scoped:
                n += 1
                try:
                    value = programs[id(rule)].evaluate(activation)
                    results.append(bool(value) if isinstance(value, celpy.celtypes.BoolType) else None)
                except Exception:
                    results.append(None)
    return t1 - t0, time.perf_counter() - t1, n, results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=200)
    args = parser.parse_args()
    fixtures = sorted(p.parent for p in (ROOT / "fixtures").rglob("expected.json"))
    rules = load_rules([builtin_rules_dir()])
    from diag.core.rules_dir import load_settings

    settings = {k: v.get("default") for k, v in load_settings(builtin_rules_dir()).items()}
    facts = large_facts(fixtures, args.copies)
    subjects = sum(len(v) for k, v in facts.scopes.items() if k != "cluster")
    print(f"{len(rules)} rules, {len(fixtures)} fixtures x {args.copies} copies = {subjects} subjects")
    outcomes = {}
    for name, fn in (("common-expression-language", bench_rust), ("cel-python", bench_python)):
        compile_s, eval_s, n, results = fn(rules, facts, settings)
        outcomes[name] = results
        print(f"{name:28} compile {compile_s * 1000:8.1f} ms   evaluate {eval_s:8.3f} s   {n / eval_s:10.0f} evals/s")
    a, b = outcomes.values()
    disagree = sum(1 for x, y in zip(a, b, strict=True) if (x is True) != (y is True))  # same loop order in both
    print(f"verdicts that differ between the two: {disagree} of {len(a)}")
    kinds = Counter((x, y) for x, y in zip(a, b, strict=True) if (x is True) != (y is True))
    for (x, y), count in kinds.most_common():
        print(f"  cel={x!s:5} cel-python={y!s:5}: {count}")


if __name__ == "__main__":
    main()
