"""One process, torch CPU: a data-dependent branch inside ``forward``'s loop over the layers makes Dynamo skip the
frame (``forward`` then runs eagerly), recorded under the collector with a profiler window (used by
``test_skipped_frame.py``)."""

from __future__ import annotations

import argparse

import torch

from workbench.collectors import Collector


class Branchy(torch.nn.Module):
    """Layers applied in a loop, with a branch on a tensor's value inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
            if x.abs().mean() > 1e4:   # BRANCH: data-dependent, inside the loop
                x = x / 2
        return x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Branchy()
    # a window of several steps: a cause must recur in two of them to be a finding (one step's host hiccup is not)
    collector = Collector(args.out, profile_start=4, profile_length=4)
    compiled = collector.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)   # no second, unplanted fault (per-parameter)
    collector.instrument(compiled, opt)
    batches = [torch.randn(32, 64) for _ in range(args.steps)]   # built up front: no data loading between steps
    with collector:
        for x in batches:
            with collector.step():
                compiled(x).sum().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
    if collector.errors:
        print(f"collector errors: {collector.errors}", flush=True)


if __name__ == "__main__":
    main()
