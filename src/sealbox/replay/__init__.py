"""Replay and what-if: reproduce a recorded run under its exact conditions, and test a fix against the past.

See ``docs/replay.md``. The public names:

- :class:`Replayer`, :class:`ReplayResult`, :class:`UnreplayableStep` (``engine``);
- :class:`Divergence`, :func:`render_divergence` (``divergence``);
- :class:`StepKey` (``keys``);
- :func:`whatif_policy`, :func:`whatif_snapshot` (``whatif``);
- :func:`export_run`, :func:`load_run` (``fixtures``).
"""

from __future__ import annotations

from sealbox.replay.divergence import Divergence, render_divergence
from sealbox.replay.engine import Replayer, ReplayResult, UnreplayableStep
from sealbox.replay.fixtures import export_run, load_run
from sealbox.replay.keys import StepKey
from sealbox.replay.source import ReplayStopped
from sealbox.replay.values import ReplayedError

__all__ = ["Divergence", "ReplayResult", "ReplayStopped", "ReplayedError", "Replayer", "StepKey", "UnreplayableStep",
           "export_run", "load_run", "render_divergence"]
