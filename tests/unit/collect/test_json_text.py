"""The collectors' JSON: the same document back, a list's items one a line, in the document's order."""

import json

from diag.collect.json_text import dumps

POD_LIST = {
    "apiVersion": "v1",
    "items": [
        {"kind": "Pod", "metadata": {"name": "vllm-0", "labels": {"app": "vllm"}}, "spec": {"nodeName": "gpu-1"}},
        {"kind": "Pod", "metadata": {"name": "ünïcode-1"}, "status": {"phase": "Pending", "message": 'a\nb "q"'}},
    ],
    "kind": "List",
    "metadata": {"resourceVersion": ""},
}


def test_a_list_reads_back_the_same_with_one_item_a_line() -> None:
    text = dumps(POD_LIST)
    assert json.loads(text) == POD_LIST
    assert list(json.loads(text)) == list(POD_LIST)  # keys in the document's order
    lines = text.splitlines()
    assert len(lines) == len(POD_LIST["items"]) + 2
    assert [json.loads(line.rstrip(",")) for line in lines[1:-1]] == POD_LIST["items"]


def test_unicode_kept_or_escaped_as_asked() -> None:
    assert "ünïcode" in dumps(POD_LIST, ensure_ascii=False)
    assert "ünïcode" not in dumps(POD_LIST) and json.loads(dumps(POD_LIST)) == POD_LIST


def test_an_empty_list_and_other_documents() -> None:
    empty = {"apiVersion": "v1", "items": [], "kind": "List"}
    assert json.loads(dumps(empty)) == empty
    for document in ({"data": {"result": [1, 2]}}, [1, {"a": None}], "text", {"items": "not a list"}):
        assert json.loads(dumps(document)) == document
