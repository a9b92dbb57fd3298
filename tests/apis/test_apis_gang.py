"""apis.scheduling.gang: which gang a pod declares itself a member of."""

from __future__ import annotations

from apis.scheduling.gang import (
    ANNOTATION_GANG_NAME,
    LABEL_POD_GROUP,
    LABEL_POD_GROUP_DEPRECATED,
    gang_name,
)


def test_the_podgroup_label_wins_then_its_old_spelling_then_the_annotation() -> None:
    assert gang_name({LABEL_POD_GROUP: "a", LABEL_POD_GROUP_DEPRECATED: "b"}, {ANNOTATION_GANG_NAME: "c"}) == "a"
    assert gang_name({LABEL_POD_GROUP_DEPRECATED: "b"}, {ANNOTATION_GANG_NAME: "c"}) == "b"
    assert gang_name({LABEL_POD_GROUP: ""}, {ANNOTATION_GANG_NAME: "c"}) == "c"  # an empty label is no name
    assert gang_name({}, {}) is None
