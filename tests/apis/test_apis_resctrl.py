"""apis.extension.resctrl: the typed decoder, keys folded as Go does, malformed input as AnnotationError."""

from __future__ import annotations

import pytest

from apis.core.errors import InvalidInput
from apis.extension.errors import AnnotationError
from apis.extension.resctrl import ResctrlConfig, decode_resctrl

# the proposal's spelling (docs/proposals/koordlet/20231227-koordlet-resctrl-qos-enhance.md): upper-case LLC and MB
PROPOSAL = ('{"LLC":{"schemata":{"range":[20,80]},"schemataPerCache":[{"cacheid":0,"range":[20,30]}]},'
            '"MB":{"schemata":{"percent":20},"schemataPerCache":[{"cacheid":0,"percent":20}]}}')


def test_the_proposal_example_decodes_to_typed_values() -> None:
    cfg = decode_resctrl(PROPOSAL)
    assert cfg == ResctrlConfig(llc_range=(20, 80), llc_per_cache=((0, (20, 30)),), mb_percent=20,
                                mb_per_cache=((0, 20),))
    with pytest.raises(AttributeError):
        cfg.mb_percent = 5  # type: ignore[misc]  # frozen


@pytest.mark.parametrize(("text", "path"), [
    ("{", ""),
    ("[1]", ""),
    ('{"llc":{"schemata":{"range":[80,20]}}}', "llc.schemata.range"),
    ('{"mb":{"schemataPerCache":[{"cacheID":"0","percent":50}]}}', "mb.schemataPerCache[0].cacheID"),
    ('{"mb":{"schemata":{"percent":101}}}', "mb.schemata.percent"),
])
def test_malformed_input_is_one_typed_error_naming_the_field(text: str, path: str) -> None:
    with pytest.raises(AnnotationError) as e:
        decode_resctrl(text)
    assert e.value.path == path
    assert isinstance(e.value, InvalidInput)  # what every boundary catches
