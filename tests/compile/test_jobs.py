"""One job per run: a folder holding the compile logs (and traces) of several jobs is refused in one line naming the
files and how they differ, never merged; ``--job`` opens one of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import workbench
from workbench.cli import app
from workbench.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data" / "compile_logs" / "matrix"
SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "cpu-gloo-4rank"


@pytest.fixture()
def two_jobs(tmp_path: Path) -> Path:
    """The 2-rank divergent job of torch 2.13 and a single-process torch 2.5 job (another day's pid and hour)."""
    for src in [*(DATA / "2.13.0" / "divergent_2rank").glob("*.log.gz"), *(DATA / "2.5.1" / "rc_shape").glob("*.log.gz")]:
        shutil.copy(src, tmp_path / src.name)
    return tmp_path


def test_a_folder_of_two_jobs_is_refused_in_one_line(two_jobs: Path) -> None:
    with pytest.raises(InputError) as err:
        workbench.open(two_jobs)
    msg = str(err.value)
    assert "\n" not in msg and "2 jobs in one folder, not merged" in msg and "--job j1" in msg
    assert "pids" in msg and "start" in msg
    for log in two_jobs.iterdir():
        assert log.name in msg


def test_job_opens_one_of_them(two_jobs: Path) -> None:
    j1, j2 = workbench.open(two_jobs, job="j1"), workbench.open(two_jobs, job="j2")
    assert {len(set(r.compiles["rank"].to_list())) for r in (j1, j2)} == {1, 2}
    assert {r.compiles.height for r in (j1, j2)} == {2, 3}   # rc_shape: 2 compiles; divergent: 1 + 2
    with pytest.raises(InputError, match="no such job"):
        workbench.open(two_jobs, job="j9")


def test_cli_refuses_then_opens_with_job(two_jobs: Path) -> None:
    runner = CliRunner()
    refused = runner.invoke(app, ["analyze", str(two_jobs)])
    assert refused.exit_code != 0 and "2 jobs in one folder" in refused.output + str(refused.exception)
    for cmd in (["analyze", str(two_jobs), "--job", "j2", "--json"],
                ["export", str(two_jobs), "--job", "j2", "-o", str(two_jobs / "out.json"), "-q"]):
        ok = runner.invoke(app, cmd)
        assert ok.exit_code == 0, ok.output


def test_one_job_of_traces_and_logs_stays_one_run(tmp_path: Path) -> None:
    """A loose folder with every rank's trace and compile log of one collector job (pids link them)."""
    for f in [*SAMPLE.glob("rank*/trace/*.json.gz"), *SAMPLE.glob("rank*/compile/*.log")]:
        shutil.copy(f, tmp_path / f.name)
    run = workbench.open(tmp_path)
    assert run.ranks.height == 4 and set(run.compiles["rank"].to_list()) == {0, 1, 2, 3}


def test_tlparse_multi_rank_runtime_is_two_jobs() -> None:
    """tlparse's ``multi_rank_runtime`` folder: ranks 0-4 ran on 08-04 (pids 1142857…), ranks 5-6 are one log of
    another job 11 days later (pid 149327, its lines say rank 1). Refused, never a 7-rank run; each job opens."""
    folder = DATA / "tlparse_inputs" / "logs" / "multi_rank_runtime"
    with pytest.raises(InputError, match=r"2 jobs in one folder.*10\.8 days apart"):
        workbench.open(folder)
    assert set(workbench.open(folder, job="j1").compiles["rank"].to_list()) == {0, 1, 2, 3, 4}
    assert set(workbench.open(folder, job="j2").compiles["rank"].to_list()) == {5, 6}
