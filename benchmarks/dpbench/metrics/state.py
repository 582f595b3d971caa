"""State: floats a streaming method holds. dpstream: ``state_size()`` (measured from the engine's arrays),
final = after the last tick (the horizon flushes every buffer), peak = the largest after any tick (and the
engine's own ``peak_state``). MiniBatchKMeans: its k centers, k counts and one batch."""
from __future__ import annotations


class StateTracker:
    def __init__(self):
        self.peak = 0

    def after_tick(self, model) -> None:
        if hasattr(model, "state_size"):
            self.peak = max(self.peak, int(model.state_size()))

    def finish(self, model, tick: int, d: int) -> dict:
        if hasattr(model, "state_size"):
            peak = max(self.peak, int(model.state_size(peak=True)))
            return dict(state_final=int(model.state_size()), state_max=peak)
        C = model.cluster_centers_
        return dict(state_final=int(C.size + C.shape[0] + tick * d), state_max=None)


def percent_of_nd(floats, n: int, d: int):
    return None if floats is None else 100.0 * floats / (n * d)
