"""What the command line writes goes only where the user named: never through a link planted beside it."""

from __future__ import annotations

from typer.testing import CliRunner

from workbench.cli import app


def test_recommend_output_is_never_written_through_a_link(tmp_path, repo_dir):
    """A hostile folder holds ``fixes.toml.tmp`` → the user's file: ``recommend -o fixes.toml`` leaves it alone."""
    victim = tmp_path / "victim"
    victim.write_text("# yours\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "fixes.toml.tmp").symlink_to(victim)
    (out / "fixes.toml").symlink_to(tmp_path / "also-yours")
    res = CliRunner().invoke(app, ["recommend", str(repo_dir / "sample_traces" / "cpu-recompile-before"),
                                   "-o", str(out / "fixes.toml")])
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "# yours\n" and not (tmp_path / "also-yours").exists()
    written = out / "fixes.toml"
    assert written.is_file() and not written.is_symlink() and "[" in written.read_text()
