"""Pure analyses: functions from workbench tables (polars) to tables. They never plot, print or read files."""
