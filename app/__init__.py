"""The Dash web UI: pages assembled from analyses and the shared figure builders in ``workbench.figures``."""
