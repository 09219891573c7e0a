"""Local SGD's averaging period: fixed, or adapted to the training loss (AdaComm).

With a period of H batches every device trains H batches from the global
weights before the round's average: H times fewer rounds, at the price of
devices drifting apart in between. Wang and Joshi (AdaComm, 2019) start with
a long period, when the loss is high and drift matters little, and shorten it
as the loss falls: ``H_l = ceil(H_0 * sqrt(F_l / F_0))``, with ``F_0`` the
first round's training loss and ``F_l`` the last one's. AdaComm re-decides at
fixed wall-clock intervals; here every round does (the devices' mean loss of
the round just trained).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgelab.common.errors import ConfigError

PERIOD_RULES = ("fixed", "adaptive")


@dataclass
class SyncPeriod:
    """Batches the next round trains, from the losses of the rounds before.

    Examples
    --------
    >>> period = SyncPeriod(8, "adaptive")
    >>> period.adapts, SyncPeriod(8).adapts
    (True, False)
    >>> period.next()
    8
    >>> period.observe(2.0); period.observe(0.5)
    >>> period.next()  # sqrt(0.5 / 2.0) * 8
    4
    """

    base: int
    rule: str = "fixed"
    first_loss: float | None = None
    last_loss: float | None = None

    def __post_init__(self) -> None:
        if self.rule not in PERIOD_RULES:
            raise ConfigError("sync_period_rule", self.rule, f"one of {', '.join(PERIOD_RULES)}")

    @property
    def adapts(self) -> bool:
        """Whether the losses move the period: a fixed one needs none (the round's mean loss goes untaken)."""
        return self.rule != "fixed"

    def next(self) -> int:
        """The period of the next round (the base until a loss was seen)."""
        if self.rule == "fixed" or self.first_loss is None or self.last_loss is None or not self.first_loss > 0:
            return self.base
        return max(1, math.ceil(self.base * math.sqrt(max(self.last_loss, 0.0) / self.first_loss) - 1e-9))

    def observe(self, loss: float) -> None:
        """The devices' mean training loss of the round just trained (NaN or inf: ignored)."""
        if not math.isfinite(loss):
            return
        if self.first_loss is None:
            self.first_loss = loss
        self.last_loss = loss
