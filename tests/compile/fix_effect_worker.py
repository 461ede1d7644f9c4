"""One process, torch CPU: the issue's case. ``torch.compile(model, dynamic=False)`` is called BEFORE the collector
exists, then 10 sequence lengths on dim 1; the compile config (``--compile-config``) is applied by the collector.
Used by ``test_took_effect.py``."""

from __future__ import annotations

import argparse

import torch

from workbench.collectors import Collector


class Summer(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum(dim=1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--compile-config", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    compiled = torch.compile(Summer(), backend="eager", dynamic=False)   # before the collector: the order
    collector = Collector(args.out, compile_config=args.compile_config)
    with collector:
        for step, n in enumerate(range(8, 28, 2)):
            with collector.step():
                compiled(torch.randn(4, n))
    if collector.errors:
        print(f"collector errors: {collector.errors}", flush=True)


if __name__ == "__main__":
    main()
