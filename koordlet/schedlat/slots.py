"""The eBPF program's pod slots: which slot a new pod gets, so the slots read each tick follow the live pods."""

from __future__ import annotations

import bisect
import collections

QUARANTINE_READS = 60  # a freed slot serves no new pod for this many reads (a minute of ticks at 1 s)


class SlotPool:
    """Slots 1..max_slots-1 (slot 0 is the host's). A freed slot waits `quarantine` reads, so a gone pod's late
    waits do not land in a new pod at once; then the lowest waiting slot is reused first, and free slots at the
    top are given back, so the slots in use stay below `high` ≈ live pods + one quarantine of churn (every tick
    reads slots 0..high-1). Handing out slots in turn instead would walk every slot under churn and have each tick
    read all of them."""

    __slots__ = ("_quarantine", "_quarantine_reads", "_reads", "_reusable", "high", "max_slots")

    def __init__(self, max_slots: int, quarantine: int = QUARANTINE_READS) -> None:
        self.max_slots, self._quarantine_reads = max_slots, quarantine
        self.high = 1  # slots in use are below this
        self._reads = 0
        self._quarantine: collections.deque[tuple[int, int]] = collections.deque()  # (slot, read when freed)
        self._reusable: list[int] = []  # sorted

    def read(self) -> None:
        """A tick read the slots: slots freed `quarantine` reads ago become reusable."""
        self._reads += 1
        while self._quarantine and self._reads - self._quarantine[0][1] >= self._quarantine_reads:
            bisect.insort(self._reusable, self._quarantine.popleft()[0])
        while self._reusable and self._reusable[-1] == self.high - 1:  # the top is free: read no more of it
            self._reusable.pop()
            self.high -= 1

    def take(self) -> int | None:
        """A slot for a new pod (it may have served a gone one: the caller zeroes its sums); None when every slot
        serves a live pod."""
        if self._reusable:
            return self._reusable.pop(0)
        if self.high < self.max_slots:
            self.high += 1
            return self.high - 1
        if self._quarantine:  # every slot taken or waiting: the one freed longest ago
            return self._quarantine.popleft()[0]
        return None

    def free(self, slot: int) -> None:
        self._quarantine.append((slot, self._reads))

    def waiting(self) -> list[int]:
        """Freed slots not yet reusable, oldest first."""
        return [slot for slot, _ in self._quarantine]
