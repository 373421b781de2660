"""jfl.cli: command lines generated from experiment configs (nothing here compiles or runs).

List flags take three syntaxes, ``--help`` exits 0, booleans come as ``--x/--no-x``, and every
bad input (tyro's parse errors and the config's checks alike) is one stderr line
``<prog>: error: <message>`` with exit status 2.
"""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from jfl import cli
from jfl.__main__ import main as jfl_main
from jfl.experiments import EXPERIMENTS, CsUcbQFairness, FlRbcsf, VBetaGrid
from tests.helpers import cli_fails

# --------------------------------------------------------------------------- parsing


def test_no_flags_give_the_config_defaults():
    for config_type in EXPERIMENTS.values():
        assert cli.parse(config_type, [], prog="prog") == config_type()


@pytest.mark.parametrize(
    "argv",
    [
        ["--V", "0,25,50"],
        ["--V", "0", "25", "50"],
        ["--V", "0:50:3"],
        ["--V", "0,", "25,", "50"],
        ["--V", "0, 25", "50"],
    ],
    ids=["commas", "spaces", "range", "trailing-commas", "mixed"],
)
def test_list_syntaxes_give_the_same_config(argv):
    config = cli.parse(VBetaGrid, [*argv, "--beta", "0.1", "--seeds", "4"], prog="prog")
    assert config == VBetaGrid(V=(0.0, 25.0, 50.0), beta=(0.1,), seeds=4)


def test_name_lists_take_commas_or_spaces():
    commas = cli.parse(VBetaGrid, ["--policies", "rbcsf,random"], prog="prog")
    spaces = cli.parse(VBetaGrid, ["--policies", "rbcsf", "random"], prog="prog")
    assert commas.policies == spaces.policies == ("rbcsf", "random")


def test_concentrations_take_iid_as_infinity():
    config = cli.parse(FlRbcsf, ["--gamma1", "1,10,iid"], prog="prog")
    assert config.gamma1 == (1.0, 10.0, math.inf)
    assert cli.parse(FlRbcsf, ["--gamma1", "0.5", "IID"], prog="prog").gamma1 == (0.5, math.inf)
    assert cli.parse_concentrations("2, iid", "--gamma1") == [2.0, math.inf]
    assert cli.parse_concentrations("2, iid,", "--gamma1") == [2.0, math.inf]
    for bad, message in (
        ("0", "must be > 0"),
        ("x", "expected numbers > 0 or 'iid'"),
        ("", "no"),
        ("1,,iid", "--gamma1: an empty item in '1,,iid'"),
    ):
        with pytest.raises(ValueError, match=message):
            cli.parse_concentrations(bad, "--gamma1")


def test_booleans_have_a_no_form():
    default = cli.parse(VBetaGrid, [], prog="prog")
    assert default.plots and not default.quiet and default.fast_prng and not default.resume
    config = cli.parse(
        VBetaGrid, ["--no-plots", "--quiet", "--no-fast-prng", "--resume"], prog="prog"
    )
    assert not config.plots and config.quiet and not config.fast_prng and config.resume
    assert cli.parse(VBetaGrid, ["--no-plots", "--plots"], prog="prog").plots
    # Every boolean has both forms, whatever its default.
    assert CsUcbQFairness().compilation_cache and not CsUcbQFairness().trajectories
    assert not cli.parse(CsUcbQFairness, ["--no-compilation-cache"], prog="prog").compilation_cache
    assert cli.parse(CsUcbQFairness, ["--trajectories"], prog="prog").trajectories
    assert not cli.parse(CsUcbQFairness, ["--no-trajectories"], prog="prog").trajectories


def test_help_exits_0_listing_the_flags(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse(VBetaGrid, ["--help"], prog="v_beta_grid.py")
    assert exc.value.code in (0, None)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "v_beta_grid.py" in text
    for flag in ("--V", "--beta", "--p-available", "--seeds", "--out", "--no-plots", "--resume"):
        assert flag in text, flag
    assert "error" not in captured.err


def _help(config_type, capsys) -> list[str]:
    with pytest.raises(SystemExit) as exc:
        cli.parse(config_type, ["--help"], prog="prog")
    assert exc.value.code in (0, None)
    return capsys.readouterr().out.splitlines()


def test_help_lists_the_experiments_own_flags_first_then_sections(capsys):
    """fl_selection's --help: its own flags first, each policy's hyperparameters under its name,
    the training flags, then sweep, output, execution and distributed; every flag of tyro's
    parser is listed once, no "{None}|" metavar."""
    from jfl.experiments import FlSelection

    lines = _help(FlSelection, capsys)
    titles = [line[:-1] for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert titles == [
        "fl_selection options",
        "rbcsf hyperparameters",
        "fedcs hyperparameters",
        "dirichlet_random hyperparameters",
        "pow_d, cpow_d, rpow_d hyperparameters",
        "e3cs hyperparameters",
        "training options",
        "sweep",
        "output",
        "execution",
        "distributed",
    ]
    section = {}
    for line in lines:
        if line in {f"{title}:" for title in titles}:
            current = line[:-1]
        elif line.startswith("  --"):
            section[line.split()[0].rstrip(",")] = current
    assert section["--policies"] == section["--partition"] == "fl_selection options"
    assert section["--V"] == section["--beta"] == "rbcsf hyperparameters"
    assert section["--d"] == "pow_d, cpow_d, rpow_d hyperparameters"
    assert section["--lr"] == "training options"
    assert section["--seeds"] == "sweep" and section["--chunk-size"] == "execution"
    assert section["--out"] == "output" and section["--coordinator"] == "distributed"
    text = "\n".join(lines)
    assert "{None}" not in text and "(default: None)" not in text
    assert lines[0] == "usage: prog [-h] [OPTIONS]"


def test_every_shared_flag_has_one_help_section():
    from jfl.driver import Experiment

    listed = [name for names in cli.FLAG_SECTIONS.values() for name in names]
    assert sorted(listed) == sorted(f.name for f in dataclasses.fields(Experiment))


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_every_experiments_help_lists_each_flag_once(name, capsys):
    flags = {
        option
        for action in cli.argument_parser(EXPERIMENTS[name])._actions
        for option in action.option_strings
        if option.startswith("--")
    }
    lines = _help(EXPERIMENTS[name], capsys)
    invocations = [re.split(r"\s{2,}", line.strip())[0] for line in lines if line.startswith("  -")]
    shown = [
        option.rstrip(",")
        for invocation in invocations
        for option in invocation.split()
        if option.startswith("--")
    ]
    assert sorted(shown) == sorted(flags)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--seeds", "many"], ["--seeds", "'many'"]),  # a word for an int
        (["--m", "2.5"], ["--m", "'2.5'"]),
        (["--p-available", "high"], ["--p-available", "'high'"]),
        (["--bogus"], ["--bogus"]),  # an unknown flag
        (["--N", "2"], ["--N"]),  # a flag of another experiment
        (["--V", "1,x"], ["--V", "'1,x'"]),  # a bad list
        (["--V", "0:50"], ["--V", "start:stop:count"]),
        (["--V", "0:50:x"], ["--V", "start:stop:count"]),
        (["--V", "1:10:0"], ["--V", "count of start:stop:count must be an integer >= 1"]),
        (["--V", "1,,10"], ["--V", "an empty item in '1,,10'"]),
        (["--ci", "normal"], ["--ci", "normal"]),  # not one of the choices
        (["--seeds"], ["--seeds"]),  # a flag without its value
    ],
)
def test_parse_errors_are_one_line_naming_the_flag(argv, expected, capsys, tmp_path):
    line = cli_fails(VBetaGrid, argv, capsys, tmp_path)
    for word in expected:
        assert word in line, line
    assert "─" not in line and "---" not in line  # no trace of tyro's panel


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
        (["--m", "41"], "--m must be an integer in [1, --clients=40], got 41"),
        (["--p-available", "1.5"], "--p-available must be in [0, 1], got 1.5"),
        (["--beta", "1.5"], "--beta must be in [0, 1], got [1.5]"),
        (["--resume", "--overwrite"], "--resume and --overwrite exclude each other"),
        (["--reuse-stale", "--overwrite"], "--reuse-stale and --overwrite exclude each other"),
    ],
)
def test_check_errors_are_one_line(argv, message, capsys, tmp_path):
    assert cli_fails(VBetaGrid, argv, capsys, tmp_path) == f"prog: error: {message}"


def test_an_out_that_cannot_be_written_is_one_line(capsys, tmp_path):
    (tmp_path / "file.txt").write_text("not a folder")
    line = cli_fails(VBetaGrid, ["--out", str(tmp_path / "file.txt" / "sub")], capsys)
    file = tmp_path / "file.txt"
    assert line == f"prog: error: --out {file}/sub: {file} is a file, not a directory"
    assert cli_fails(VBetaGrid, ["--out", "/proc/jfl"], capsys).startswith(
        "prog: error: --out /proc/jfl: cannot create folders in /proc ("
    )
    assert not any(p.name.startswith(".jfl-probe") for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # an int32 counter or shape would overflow
        (["--rounds", "99999999999"], "--rounds must be at most 2147483647 (the device counts "),
        (["--seeds", "2147483648"], "--seeds must be at most 2147483647"),
        (["--clients", "20000000"], "--clients must be an integer in [1, 10000000], got 20000000"),
        # fits int32, not memory: the figure and the way out, before compiling
        (
            ["--seeds", "100000000"],
            "--seeds 100000000: 2 chunks in flight of 1 configuration(s) × ",
        ),
        (
            ["--seeds", "10000000", "--chunk-size", "4"],
            "use a smaller --chunk-size or fewer --seeds",
        ),
    ],
)
def test_sizes_beyond_the_device_are_one_line(argv, message, capsys, tmp_path):
    line = cli_fails(VBetaGrid, [*argv, "--no-plots"], capsys, tmp_path)
    assert message in line


def test_ctrl_c_is_one_line_exit_130_and_keeps_the_chunks(capsys, tmp_path, monkeypatch):
    """An interrupt inside the sweep: one line saying what is kept and how to go on."""
    from jfl import driver

    (tmp_path / "out" / "chunks" / "random").mkdir(parents=True)
    (tmp_path / "out" / "chunks" / "random" / "chunk_000000.npz").write_bytes(b"")

    def interrupted(config, **options):
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "run", interrupted)
    out = tmp_path / "out"
    assert cli.main(VBetaGrid, ["--out", str(out)], prog="prog") == 130
    captured = capsys.readouterr()
    assert captured.err == (
        f"prog: interrupted: 1 chunk kept in {out}; run the same command to continue\n"
    )
    assert captured.out == ""


def test_a_mistyped_flag_gets_the_nearest_one(capsys):
    line = cli_fails(VBetaGrid, ["--sedes", "3"], capsys)
    assert "--sedes" in line and line.endswith("; did you mean --seeds?"), line
    assert "did you mean" not in cli_fails(VBetaGrid, ["--seeds", "many"], capsys)
    # tyro lists --base-seed first for --seed; the nearest by name is --seeds.
    assert cli_fails(VBetaGrid, ["--seed", "4"], capsys).endswith("; did you mean --seeds?")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "1.5"], "--rounds must be an integer, got '1.5'"),
        (["--seeds", "many"], "--seeds must be an integer, got 'many'"),
        (["--p-available", "high"], "--p-available must be a number, got 'high'"),
    ],
)
def test_parse_errors_speak_as_the_checks_do(argv, message, capsys):
    """No "value error: Error parsing …" nor Python's "invalid literal for int()"."""
    assert cli_fails(VBetaGrid, argv, capsys) == f"prog: error: {message}"


def test_an_empty_out_is_refused_not_the_current_directory(capsys):
    line = cli_fails(VBetaGrid, ["--out", "", "--no-plots"], capsys)
    assert line == "prog: error: --out must name a directory, got ''"


def test_prog_defaults_to_the_script_name(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("sys.argv", ["sweeps/v_beta_grid.py"])
    with pytest.raises(SystemExit):
        cli.main(VBetaGrid, ["--seeds", "0", "--out", str(tmp_path / "out")])
    assert capsys.readouterr().err.startswith("v_beta_grid.py: error: --seeds")


@pytest.mark.parametrize(
    "panel",
    [
        # On a terminal tyro draws a box ...
        "╭─ Value error ──────╮\n│ Error parsing --V: expected a  │\n│ list, got 'x'  │\n"
        "│ ──────────── │\n│ Argument helptext: │\n╰────────────╯\n",
        # ... and with captured or redirected output a title over a rule of dashes.
        " Value error   \n -------------- \n  Error parsing --V: expected a   \n  list, got 'x' \n"
        "  --------------\n  Argument helptext:  \n",
    ],
    ids=["terminal", "redirected"],
)
def test_one_line_of_either_panel_style_keeps_the_whole_message(panel):
    assert cli._one_line(panel) == "value error: Error parsing --V: expected a list, got 'x'"


def test_an_experiment_without_summary_columns_prints_the_means():
    import pandas as pd

    summary = pd.DataFrame({"policy": ["a"], "x": [1.0], "x_lo": [0.5], "x_hi": [1.5]})
    assert cli.means(summary) == ("policy", "x")
    assert cli.format_table(summary, cli.means(summary)).splitlines()[0].split() == ["policy", "x"]


def test_format_table_keeps_the_known_columns():
    import pandas as pd

    summary = pd.DataFrame({"policy": ["rbcsf"], "V": [1.0], "other": [2.0]})
    text = cli.format_table(summary, ("policy", "V", "missing"))
    assert "rbcsf" in text and "V" in text and "other" not in text
    assert "more rows" not in text


def test_intervals_are_printed_with_the_digits_that_tell_their_bounds_apart():
    """A mean and its bounds share the fewest significant digits (3 at least) that write
    different values differently; positional notation, no trailing zeros, integers whole."""
    import pandas as pd

    summary = pd.DataFrame(
        {
            "policy": ["a", "b", "c"],
            "switch": [7500.0, 0.0, 2.0],
            "t": [11500.24, 0.5, 3.0],
            "t_lo": [11499.91, 0.4, 3.0],
            "t_hi": [11500.63, 0.6, float("nan")],
            "lr": [0.005, 1e-5, 12345678.0],
        }
    )
    rows = [line.split() for line in cli.format_table(summary, list(summary)).splitlines()]
    assert rows[1] == ["a", "7500", "11500.2", "11499.9", "11500.6", "0.005"]
    assert rows[2] == ["b", "0", "0.5", "0.4", "0.6", "1e-05"]
    assert rows[3] == ["c", "2", "3", "3", "nan", "1.23e+07"]
    for row in np.random.default_rng(0).uniform(1e3, 1e5, (200, 1)):
        mean = row[0]
        table = pd.DataFrame({"m": [mean], "m_lo": [mean - 0.02], "m_hi": [mean + 0.03]})
        texts = cli.format_table(table, list(table)).splitlines()[1].split()
        assert len(set(texts)) == 3, texts


def test_a_cut_table_says_how_many_rows_it_left_out_and_where_the_whole_table_is(tmp_path):
    import pandas as pd

    summary = pd.DataFrame({"policy": ["rbcsf"] * 42, "V": [float(v) for v in range(42)]})
    text = cli.format_table(summary, ("policy", "V"), where=tmp_path / "summary.csv")
    lines = text.splitlines()
    assert len(lines) == 1 + 20 + 1  # header, 20 rows, the note
    assert lines[-1] == f"… 22 more rows (of 42): the whole table is {tmp_path / 'summary.csv'}"
    assert lines[-2].split() == ["rbcsf", "19"]
    exact = cli.format_table(summary.head(20), ("policy", "V"), where="x")
    assert "more rows" not in exact and len(exact.splitlines()) == 21


def test_python_m_jfl_lists_the_experiments(capsys):
    assert jfl_main([]) == 0
    listing = capsys.readouterr().out
    for name, config in EXPERIMENTS.items():
        line = next(line for line in listing.splitlines() if line.split()[:1] == [name])
        assert config.__doc__.split()[0] in line  # its one-line description


def test_python_m_jfl_refuses_an_unknown_name_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit:
        jfl_main(["v_beta", "--seeds", "2"])
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean 'v_beta_grid'?" in err


@pytest.mark.processes
def test_python_m_jfl_runs_an_experiment_with_its_scripts_flags(tmp_path):
    """The module and the script parse the same flags into the same config and run it."""
    flags = ["--policies", "random", "--seeds", "2", "--rounds", "4", "--clients", "4", "--m", "2"]
    flags += ["--quiet", "--no-plots", "--out", str(tmp_path / "m")]
    done = subprocess.run(
        [sys.executable, "-m", "jfl", "v_beta_grid", *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "1 configurations × 2 seeds × 4 rounds" in done.stdout
    assert (tmp_path / "m" / "summary.csv").exists()
    assert cli.parse(VBetaGrid, flags) == cli.parse(EXPERIMENTS["v_beta_grid"], flags)


@pytest.mark.processes
def test_help_to_a_reader_that_went_away_exits_quietly():
    """``--help | head -n 3``: the reader closes before the help is written. Here nobody reads
    at all, so the first write fails with EPIPE whatever the pipe's buffer holds: exit 0, no
    BrokenPipeError traceback (nor "Exception ignored" at the interpreter's last flush)."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        script = [sys.executable, "-m", "jfl", "fl_selection", "--help"]
        done = subprocess.run(script, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_parse_values_lists_and_ranges():
    assert cli.parse_values("1,10,20", "V") == [1.0, 10.0, 20.0]
    assert cli.parse_values(" 1, 10 ,20, ", "V") == [1.0, 10.0, 20.0]
    assert cli.parse_values("0:50:11", "V") == pytest.approx(list(np.linspace(0, 50, 11)))
    assert cli.parse_values("2:2:1", "V") == [2.0]
    assert cli.parse_values("0.15", "beta") == [0.15]
    for bad in ("", "a,b", "0:1", "0:1:0", "0:1:x", "0:1:2.5", ",,", "1,,10", ",1"):
        with pytest.raises(ValueError, match="--V"):
            cli.parse_values(bad, "V")
    # What is wrong, said: the range's count, an empty item.
    with pytest.raises(ValueError, match=r"count of start:stop:count must be an integer >= 1"):
        cli.parse_values("1:10:0", "V")
    with pytest.raises(ValueError, match="an empty item in '1,,10'"):
        cli.parse_values("1,,10", "V")
