"""apis.core.gojson: the text Go's json.Marshal and MarshalIndent write, which upstream compares byte for byte."""

from __future__ import annotations

import json

from apis.core.gojson import marshal


def test_compact_with_html_characters_and_line_separators_escaped() -> None:
    value = {"b": "<a&b>", "a": ["é", "\u2028\u2029"], "n": 1}
    text = marshal(value)
    assert text == '{"b":"\\u003ca\\u0026b\\u003e","a":["é","\\u2028\\u2029"],"n":1}'  # json.Marshal's bytes
    assert json.loads(text) == value


def test_indented_as_marshal_indent() -> None:
    text = marshal([{"k": ">"}], indent=2)
    assert text == '[\n  {\n    "k": "\\u003e"\n  }\n]'
    assert json.loads(text) == [{"k": ">"}]
