"""The zoo's registry and its place beside the core: every spec is read from its script's source without running
it (listing the zoo imports no torch, the runner no polars), and equals the script's own ``FAULT``; a spec that is
not a literal is one line naming the file, line and argument; ``workbench faults`` runs the zoo's command line, and
where the zoo is not installed it is not listed and says how to install it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

pytest.importorskip("workbench_zoo", reason="the fault zoo is not installed (pip install -e ./zoo)")

from workbench_zoo.registry import fault_names, faults, load_module, read_spec  # noqa: E402


def test_listing_and_the_runner_import_neither_torch_nor_polars():
    code = ("import sys; import workbench_zoo.runner, workbench_zoo.truth, workbench_zoo._launch; "
            "from workbench_zoo.registry import faults; n = len(faults()); "
            "print(n, 'torch' in sys.modules, 'polars' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(len(fault_names())), "False", "False"], out
    code = "import sys; import workbench_zoo.verify; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_every_spec_read_from_source_is_the_scripts_own_fault():
    pytest.importorskip("torch")
    specs = faults()
    assert len(specs) == len(fault_names()) >= 25
    for name, spec in specs.items():
        assert load_module(name).FAULT == spec, name


def test_the_graph_break_and_hang_trios_share_one_loop_each():
    """Three names each, as before; their ``main`` runs one loop (its module's ``train``)."""
    pytest.importorskip("torch")
    from workbench_zoo.faults import _graph_break, _hang_common

    for names, shared in ((("graph_break_branch", "graph_break_item", "graph_break_print"), _graph_break),
                          (("hang_extra_collective", "hang_rank_killed", "hang_size_mismatch"), _hang_common)):
        for name in names:
            main = load_module(name).main
            assert "train" in main.__code__.co_names and main.__globals__["train"] is shared.train, name


def test_gpu_idle_specs_plant_in_the_loops_window():
    pytest.importorskip("torch")
    from workbench_zoo.faults import _gpu_idle

    gpu = {n: f for n, f in faults().items() if n.startswith("gpu_")}
    assert len(gpu) == 6
    for name, f in gpu.items():
        assert (f.steps, f.num_steps, f.device, f.world_size) == (_gpu_idle.FAULT_WINDOW, _gpu_idle.NUM_STEPS,
                                                                  "cuda", 1), name


@pytest.mark.parametrize("body,said", [
    ('STEPS = (5,)\nFAULT = Fault(name="x", description="d", finding="k", ranks=(1,), steps=STEPS)\n',
     "x.py:2: FAULT argument 'steps' is not a literal"),
    ('FAULT = Fault("x", "d", "k", (1,))\n', "x.py:1: FAULT = Fault(...) takes keyword arguments only"),
    ('FAULT = Fault(name="y", description="d", finding="k", ranks=(1,))\n',
     "x.py:1: FAULT name 'y' is not the module's name 'x'"),
    ('FAULT = Fault(name="x", description="d", finding="k", ranks=(1,), colour="red")\n',
     "x.py:1: FAULT: "),
    ('import torch\n', "x.py: no module-level FAULT = Fault(...)"),
])
def test_a_spec_that_cannot_be_read_is_one_line_naming_the_file(tmp_path, body, said):
    path = tmp_path / "x.py"
    path.write_text(body)
    with pytest.raises(ValueError) as exc:
        read_spec(path)
    assert said in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_a_literal_spec_is_read_without_running_the_script(tmp_path):
    path = tmp_path / "x.py"
    path.write_text('raise SystemExit("never run")\nFAULT = Fault(name="x", description="a" " b", finding="k",\n'
                    '              ranks=[1], steps=(2, 3), rank_env={1: {"A": "1"}})\n')
    f = read_spec(path)
    assert (f.name, f.description, f.ranks, f.steps, f.rank_env) == ("x", "a b", (1,), (2, 3), {1: {"A": "1"}})


def test_workbench_faults_runs_the_zoos_command_line():
    from workbench.cli import app

    listed = CliRunner().invoke(app, ["faults", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [f["name"] for f in json.loads(listed.output)] == fault_names()
    unknown = CliRunner().invoke(app, ["faults", "run", "no_such_fault", "--out", "unused"])
    assert unknown.exit_code == 2 and "unknown fault 'no_such_fault'" in unknown.output
    helped = CliRunner().invoke(app, ["faults", "--help"])
    assert helped.exit_code == 0 and "usage: workbench faults" in helped.output
    assert "faults" in CliRunner().invoke(app, ["--help"]).output             # listed where it is installed


def test_without_the_zoo_workbench_faults_is_unlisted_and_says_how_to_install_it(monkeypatch):
    import typer

    from workbench.commands import faults as command

    monkeypatch.setitem(sys.modules, "workbench_zoo", None)     # not importable, as where it is not installed
    app = typer.Typer()
    app.command("info")(lambda: None)
    command.register(app)
    helped = CliRunner().invoke(app, ["--help"])
    assert helped.exit_code == 0 and "faults" not in helped.output, helped.output
    ran = CliRunner().invoke(app, ["faults", "list"])
    assert ran.exit_code == 2, ran.output
    assert ran.output.strip().splitlines() == [f"error: the fault zoo is not installed: {command.INSTALL}"]
    assert "pip install -e ./zoo" in command.INSTALL


@pytest.mark.slow
def test_a_relative_out_is_the_callers_folder(zoo, tmp_path, monkeypatch):
    """The ranks write where the caller meant, whatever folder the zoo is installed in."""
    from workbench_zoo.runner import failed_ranks, run_fault

    monkeypatch.chdir(tmp_path)
    truth = run_fault("graph_break_item", "rel")
    assert not failed_ranks(truth), truth["returncodes"]
    assert (tmp_path / "rel" / "run.json").is_file() and (tmp_path / "rel" / "fault" / "rank0.json").is_file()
    assert truth["line"].endswith("graph_break_item.py:24"), truth["line"]


def test_the_verifier_reads_the_kind_specs_and_refuses_an_undeclared_kind(tmp_path, monkeypatch):
    from workbench.analyses.kinds import Kind
    from workbench_zoo.registry import get_fault
    from workbench_zoo.verify import loop, planted_kinds

    assert planted_kinds(get_fault("config_drift")) == (Kind.DIVERGENT_CONFIG, Kind.DIVERGENT_FINGERPRINT)
    assert planted_kinds(get_fault("recompile_limit")) == (Kind.RECOMPILE_LIMIT, Kind.RECOMPILE_SHAPE)
    assert planted_kinds(get_fault("gpu_eager_frame"))[0] == Kind.SKIPPED_FRAME
    # a fault whose finding names no declared kind: the verifier says in one line why it cannot check it, before
    # anything runs
    import dataclasses

    import workbench_zoo.verify as verify

    odd = dataclasses.replace(get_fault("gpu_eager_frame"), finding="not_a_kind")
    monkeypatch.setattr(verify, "get_fault", lambda name: odd)
    with pytest.raises(ValueError) as err:
        loop("gpu_eager_frame", tmp_path)
    assert str(err.value) == ("fault gpu_eager_frame: its finding 'not_a_kind' is not a declared finding kind "
                              "(analyses/kinds.py), so the verifier cannot check it")
    assert not any(tmp_path.iterdir())
