"""examples/walkthrough.ipynb runs top to bottom (nbclient, a real Jupyter kernel), so it never goes stale."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "examples" / "walkthrough.ipynb"


def test_walkthrough_notebook_executes():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    for name in ("h200x2-planted", "cpu-recompile-before", "cpu-recompile-after"):
        if not (REPO / "sample_traces" / name).is_dir():
            pytest.skip(f"sample_traces/{name} is absent")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO / "examples")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "divergent_recompile:" in text and "measured" in text
    reprs = [o["data"].get("text/plain", "") for o in outputs if o.get("output_type") == "execute_result"]
    assert reprs[0].startswith("Run('h200x2-planted': 2 ranks on NVIDIA H200"), reprs[0]
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 3, "timeline, step period and collective waits"
