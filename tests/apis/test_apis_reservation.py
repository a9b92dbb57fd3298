"""apis.scheduling.reservation: the reservation-allocated annotation's decoder and encoder."""

from __future__ import annotations

import pytest

from apis.extension.errors import AnnotationError
from apis.scheduling.reservation import (
    ReservationAllocated,
    decode_reservation_allocated,
    encode_reservation_allocated,
)


@pytest.mark.parametrize("ref", [ReservationAllocated("r1", "6a1f"), ReservationAllocated("r1")])
def test_what_the_encoder_writes_decodes_to_the_same_reference(ref: ReservationAllocated) -> None:
    assert decode_reservation_allocated(encode_reservation_allocated(ref)) == ref


def test_upstream_shape_and_malformed_input() -> None:
    # apis/extension/reservation.go ReservationAllocated as koord-scheduler writes it
    assert decode_reservation_allocated('{"name":"r1","uid":"6a1f"}') == ReservationAllocated("r1", "6a1f")
    assert encode_reservation_allocated(ReservationAllocated("r1")) == '{"name":"r1"}'
    for text in ("{", '["r1"]', "null"):
        with pytest.raises(AnnotationError):
            decode_reservation_allocated(text)
