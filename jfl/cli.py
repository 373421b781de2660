"""Command lines generated from typed experiment configs (tyro).

A sweep script is ``sys.exit(jfl.cli.main(SomeExperiment))``: every field of the frozen config
dataclass is a flag (``p_available`` → ``--p-available``, booleans get ``--x/--no-x``), with its
default and help text from the field's docstring. List fields take ``1,10,20``, ``1 10 20`` or
an inclusive range ``start:stop:count``.

Bad input gets one line, ``<prog>: error: <message>``, and exit status 2, before anything
compiles: tyro's own parse errors (a word where a number belongs) are folded into that line, and
so is every ``ValueError`` of the config's checks and of the driver's preparation.

tyro rather than hand-written argparse: the flags, their types, defaults and help come from the
config's annotations and field docstrings, so the config is the single declaration of an
experiment's settings, and variants that override a base config inherit its flags.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import re
import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

from jfl import driver, sweep
from jfl.policies import readers

# Exit status of a sweep stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130

_BOX = re.compile(r"[╭╮╰╯│─]+")


_RANGE = re.compile(r"^\s*([^:]+):([^:]+):([^:]+)\s*$")


def parse_values(text: str, name: str) -> list[float]:
    """``"1,10,20"`` or an inclusive range ``"start:stop:count"`` (``"0:50:11"`` → 0, 5, …, 50)."""
    text = str(text).strip()
    match = _RANGE.match(text)
    if match and not (match[3].strip().isdigit() and int(match[3]) >= 1):
        raise ValueError(
            f"--{name}: the count of start:stop:count must be an integer >= 1, got {text!r}"
        )
    items = [] if match else list_items(text, f"--{name}")
    try:
        if match:
            start, stop = float(match[1]), float(match[2])
            return [float(v) for v in np.linspace(start, stop, int(match[3]))]
        values = [float(v) for v in items]
    except ValueError:
        raise ValueError(
            f"--{name}: expected a comma-separated list (1,10,20) or start:stop:count "
            f"(0:50:11), got {text!r}"
        ) from None
    if not values:
        raise ValueError(f"--{name}: no values given")
    return values


def list_items(text: str, name: str) -> list[str]:
    """The non-empty items of a comma-separated list; an empty item between two commas is refused
    (``name`` heads the message), one trailing comma is not an item."""
    items = [v.strip() for v in str(text).split(",")]
    if items[-1] == "" and len(items) > 1:
        items.pop()
    if len(items) > 1 and "" in items:
        raise ValueError(f"{name}: an empty item in {text!r} (a value missing between commas?)")
    return [v for v in items if v]


def _joined(args) -> str:
    return ",".join(a.strip().strip(",") for a in args if a.strip().strip(","))


def _floats_from_args(args) -> tuple[float, ...]:
    try:
        return tuple(parse_values(_joined(args), "value"))
    except ValueError as err:  # tyro names the flag: keep only what is wrong
        raise ValueError(str(err).removeprefix("--value: ")) from None


def _concentrations_from_args(args) -> tuple[float, ...]:
    """Numbers > 0 or ``iid`` (the concentration's → ∞ limit)."""
    try:
        return tuple(parse_concentrations(_joined(args), "value"))
    except ValueError as err:  # tyro names the flag: keep only what is wrong
        raise ValueError(str(err).removeprefix("value").lstrip(": ")) from None


def _names_from_args(args) -> tuple[str, ...]:
    names = tuple(n for n in _joined(args).split(",") if n)
    if not names:
        raise ValueError("no names given")
    return names


def _format_number(value: float) -> str:
    return "iid" if math.isinf(value) else f"{value:g}"


def _list_constructor(from_args, metavar: str, number: bool):
    fmt = _format_number if number else str
    return tyro.constructors.PrimitiveConstructorSpec(
        nargs="+",
        metavar=metavar,
        instance_from_str=from_args,
        is_instance=lambda value: isinstance(value, tuple),
        str_from_instance=lambda value: [",".join(fmt(v) for v in value)],
    )


# List flags: ``1,10,20``, ``1 10 20`` or ``start:stop:count``.
Floats = Annotated[tuple[float, ...], _list_constructor(_floats_from_args, "LIST", True)]
# Dirichlet concentrations > 0 with ``iid`` for the IID limit (stored as inf).
Concentrations = Annotated[
    tuple[float, ...], _list_constructor(_concentrations_from_args, "LIST|iid", True)
]
# Comma- or space-separated names (policies).
Names = Annotated[tuple[str, ...], _list_constructor(_names_from_args, "NAMES", False)]


def parse_concentrations(text: str, name: str) -> list[float]:
    """``"1,10,iid"`` → [1.0, 10.0, inf]: Dirichlet concentrations, IID being the limit → ∞.

    ``name`` (the flag) heads the error messages.
    """
    values = []
    for item in list_items(text, name):
        if item.lower() == "iid":
            values.append(math.inf)
            continue
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"{name}: expected numbers > 0 or 'iid', got {item!r}") from None
        if not 0 < value < math.inf:
            raise ValueError(f"{name} must be > 0 (or 'iid'), got {value}")
        values.append(value)
    if not values:
        raise ValueError(f"{name}: no values given")
    return values


def _one_line(text: str) -> str:
    """The message of tyro's error panel as one line: its title, then its first paragraph.

    The panel is drawn with box characters on a terminal and as a title over a rule of dashes
    otherwise (captured or redirected output); either way the message may wrap over lines.
    """
    lines = [_BOX.sub(" ", line).strip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    if not lines:
        return "invalid arguments"
    if lines[0].startswith("usage"):
        return next(line for line in reversed(lines) if line)
    title, message, rest = lines[0], [], lines[1:]
    for line in rest:
        rule = not line or set(line) <= set("-")
        if rule and message:
            break
        if not rule:
            message.append(line)
    if not message:
        return title
    message = " ".join(message)
    return message if message.lower().startswith(title.lower()) else f"{title.lower()}: {message}"


def fail(prog: str, message: str) -> None:
    """One line on stderr, exit status 2 (argparse's convention)."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse(experiment_type, argv=None, prog: str | None = None):
    """The config that ``argv`` describes (``--help`` prints the flags and exits 0).

    ``--setting NAME``, where the config type has ``presets`` (a mapping of names to configs),
    starts from that config: its values are the defaults, and the other flags override them.
    """
    prog = prog or Path(sys.argv[0]).name
    args = list(sys.argv[1:] if argv is None else argv)
    default = setting_default(experiment_type, args, prog)
    if {"-h", "--help"} & set(args):
        text = grouped_help(experiment_type, prog, default)
        if text is not None:
            with reader_gone_is_fine():
                print(text)
            raise SystemExit(0)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), reader_gone_is_fine():
            return tyro.cli(
                experiment_type,
                args=args,
                prog=prog,
                description=experiment_type.__doc__,
                default=default,
            )
    except SystemExit as exit:
        if exit.code:
            panel = captured.getvalue()
            fail(prog, _plain(_one_line(panel)) + _did_you_mean(panel))
        sys.stderr.write(captured.getvalue())
        raise


# ``--help``'s sections after the experiment's own flags and its policies' hyperparameters:
# the flags every experiment shares (``jfl.driver.Experiment``), by topic.
FLAG_SECTIONS = {
    "sweep": ("seeds", "base_seed", "rounds"),
    "output": (
        *("out", "resume", "overwrite", "reuse_stale", "per_run_rounds", "trajectories"),
        *("keep_chunks", "ci", "plots", "plot_at", "quiet"),
    ),
    "execution": ("chunk_size", "memory_budget", "fast_prng", "compilation_cache"),
    "distributed": (
        *("distributed", "coordinator", "num_processes", "process_id", "distributed_timeout"),
    ),
}


def grouped_help(experiment_type, prog: str, default=None) -> str | None:
    """``--help`` in sections: the experiment's own flags, each policy's hyperparameters under
    the policy's name, a nested config's flags under its name, then ``FLAG_SECTIONS``. None
    where tyro cannot hand over its parser (its own help is printed then)."""
    import argparse

    tyro_parser = argument_parser(experiment_type, prog, default)
    if tyro_parser is None:
        return None
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [-h] [OPTIONS]",
        description=tyro_parser.description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    groups: dict[str, argparse._ArgumentGroup] = {}
    own = f"{getattr(experiment_type, 'name', prog)} options"
    sections = {**_policy_sections(experiment_type), **FLAG_SECTIONS}
    for action in tyro_parser._actions:
        title = _section(action.dest.replace("-", "_"), sections) or own
        if title not in groups:
            groups[title] = parser.add_argument_group(title)
        _show(groups[title], action)
    parser._action_groups = [groups[title] for title in _ordered([own, *sections], groups)]
    return parser.format_help().rstrip()


def argument_parser(experiment_type, prog: str | None = None, default=None):
    """tyro's argparse parser of ``experiment_type`` (None for a tyro that no longer hands it
    over: ``get_parser`` is deprecated)."""
    import warnings

    options = {} if default is None else {"default": default}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return tyro.extras.get_parser(
                experiment_type, prog=prog, description=experiment_type.__doc__, **options
            )
    except Exception:
        return None


def _ordered(sections: list[str], groups: dict) -> list[str]:
    """The groups in ``sections`` order, the nested configs' before the shared ones."""
    shared = [title for title in FLAG_SECTIONS if title in groups]
    first = [title for title in sections if title in groups and title not in shared]
    nested = [title for title in groups if title not in first and title not in shared]
    return [*first, *nested, *shared]


def _policy_sections(experiment_type) -> dict[str, tuple[str, ...]]:
    """The hyperparameter fields of ``experiment_type`` that policies read, by "<policies>
    hyperparameters" title; readers among the experiment's default policies (or methods)
    where it has such (``alpha`` is RBCS-F's in an RBCS-F sweep, not LinUCB's too)."""
    chosen = getattr(experiment_type, "policies", None) or getattr(experiment_type, "methods", ())
    chosen = chosen if isinstance(chosen, tuple | list) else ()
    sections: dict[str, tuple[str, ...]] = {}
    for field in dataclasses.fields(experiment_type):
        names = readers(field.name)
        names = [p for p in names if p in chosen] or names
        if names:
            title = f"{', '.join(names)} hyperparameters"
            sections[title] = (*sections.get(title, ()), field.name)
    return sections


def _section(dest: str, sections: dict[str, tuple[str, ...]]) -> str | None:
    """The help section of the flag whose destination is ``dest``; None: the experiment's own."""
    for title, names in sections.items():
        if dest in names:
            return title
    if "." in dest:  # a nested config's field (e.g. training.lr)
        return f"{dest.split('.')[0]} options"
    return None


def _show(group, action) -> None:
    """``action`` of tyro's parser, as help text only, in ``group``: metavars without tyro's
    "{None}|" and no "(default: None)" (an optional value is just not given)."""
    options = {"help": (action.help or "").replace(" (default: None)", ""), "dest": "shown"}
    if action.nargs == 0:  # a switch (--quiet, --no-quiet) or -h
        group.add_argument(*action.option_strings, action="store_true", **options)
    else:
        metavar = str(action.metavar).removeprefix("{None}|")
        group.add_argument(*action.option_strings, metavar=metavar, **options)


def setting_default(experiment_type, args: list[str], prog: str):
    """The config of the ``--setting`` named in ``args`` (the last one given), None without one
    (or where ``experiment_type`` has no ``presets``); an unknown name fails with one line."""
    presets = getattr(experiment_type, "presets", None)
    if not presets:
        return None
    names = [
        arg.split("=", 1)[1] if arg.startswith("--setting=") else args[i + 1]
        for i, arg in enumerate(args)
        if arg.startswith("--setting=") or (arg == "--setting" and i + 1 < len(args))
    ]
    if not names:
        return None
    if names[-1] not in presets:
        fail(prog, f"--setting must be one of {sorted(presets)}, got {names[-1]!r}")
    return presets[names[-1]]


def _did_you_mean(panel: str) -> str:
    """``"; did you mean --seeds?"``: of the flags tyro's panel suggests, the nearest by name
    to the one given (``--seed``: ``--seeds``, not ``--base-seed``, which tyro lists first);
    ``""`` without suggestions."""
    import difflib

    _, found, suggested = panel.partition("Perhaps you meant:")
    flags = re.findall(r"^[^\w-]*(--[\w-]+)", suggested, flags=re.MULTILINE) if found else []
    if not flags:
        return ""
    given = re.search(r"Unrecognized options?: (--[\w-]+)", panel)
    if given:
        flags.sort(key=lambda f: -difflib.SequenceMatcher(None, given[1], f).ratio())
    return f"; did you mean {flags[0]}?"


# tyro's wording of a value its parser rejects -> the checks' own wording (jfl.checks).
_PARSING = r"value error: Error parsing (--[\w-]+): "
_PARSE_ERRORS = (
    (
        _PARSING + r"invalid literal for int\(\) with base 10: (.*)",
        r"\1 must be an integer, got \2",
    ),
    (_PARSING + r"could not convert string to float: (.*)", r"\1 must be a number, got \2"),
    (_PARSING + r"(.*)", r"\1: \2"),
)


def _plain(line: str) -> str:
    """A parse error in the checks' words: "--rounds must be an integer, got '1.5'", not
    "value error: Error parsing --rounds: invalid literal for int() with base 10: '1.5'"."""
    for pattern, replacement in _PARSE_ERRORS:
        if re.fullmatch(pattern, line):
            return re.sub(pattern, replacement, line)
    return line


def main(experiment_type, argv=None, prog: str | None = None) -> int:
    """Parse, check and run one experiment from the command line; print its summary."""
    prog = prog or Path(sys.argv[0]).name
    experiment = parse(experiment_type, argv, prog)
    try:
        with _stop_on_interrupt():
            result = driver.run(experiment, words="flags")
    except ValueError as err:  # bad settings, or a corrupt stored chunk found while resuming
        fail(prog, str(err))
    except KeyboardInterrupt:  # every finished chunk is on disk: say so, and how to go on
        kept = sweep.ChunkStore(experiment.out).finished()
        chunks = "1 chunk" if kept == 1 else f"{kept} chunks"
        print(
            f"{prog}: interrupted: {chunks} kept in {experiment.out}; run the same command to "
            "continue",
            file=sys.stderr,
        )
        if sweep.ABANDONED.is_set():  # a chunk still computing on its thread: leave at once
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(INTERRUPTED)
        return INTERRUPTED
    with reader_gone_is_fine():  # e.g. `| head`: the results are on disk already
        print(result.describe())
        if result.process == 0:
            columns = experiment.summary_columns or means(result.summary)
            if _diverged(result.summary) and "nonfinite_runs" not in columns:
                columns = (*columns, "nonfinite_runs")
            print(format_table(result.summary, columns, where=result.out / "summary.csv"))
    return 0


def _diverged(summary) -> bool:
    return "nonfinite_runs" in summary and bool(summary["nonfinite_runs"].any())


@contextlib.contextmanager
def reader_gone_is_fine():
    """Stdout's reader closing early (``--help | head``) ends the output quietly, exit 0: the
    rest goes to the null device, so neither this write nor the interpreter's last flush prints
    a BrokenPipeError traceback (the recipe of Python's ``signal`` documentation)."""

    try:
        yield
    except BrokenPipeError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        raise SystemExit(0) from None


@contextlib.contextmanager
def _stop_on_interrupt():
    """Ctrl-C raises KeyboardInterrupt and also sets ``jfl.sweep.STOP``, which stops the sweep
    at its next chunk where the exception itself was swallowed."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        sweep.STOP.set()
        raise KeyboardInterrupt

    def unraisable(report):  # the swallowed one: no "Exception ignored" traceback
        if not isinstance(report.exc_value, KeyboardInterrupt):
            previous_hook(report)

    sweep.STOP.clear()
    previous, previous_hook = signal.signal(signal.SIGINT, interrupt), sys.unraisablehook
    sys.unraisablehook = unraisable
    sweep.WAIT_OFF_MAIN.set()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
        sweep.STOP.clear()
        sweep.WAIT_OFF_MAIN.clear()


def means(summary) -> tuple[str, ...]:
    """The summary's columns without the interval bounds: what an experiment that names no
    ``summary_columns`` prints."""
    return tuple(c for c in summary if not c.endswith(("_lo", "_hi")))


def format_table(summary, columns, max_rows: int = 20, where: Path | str | None = None) -> str:
    """The summary's ``columns`` (those it has) as a text table of at most ``max_rows`` rows; a
    cut table ends with a line saying how many rows it left out and where the whole table is.
    A mean and its interval bounds share the fewest significant digits (at least 3) that tell
    apart the values that differ: 11500.2 [11499.9, 11500.6], not 1.15e+04 [1.15e+04,
    1.15e+04]."""
    columns = [c for c in columns if c in summary]
    shown = summary[columns].head(max_rows)
    text = shown.assign(**_formatted(shown)).to_string(index=False)
    left_out = len(summary) - len(shown)
    if left_out > 0:
        text += f"\n… {left_out} more rows (of {len(summary)})"
        text += f": the whole table is {where}" if where is not None else ""
    return text


def _formatted(table) -> dict[str, list[str]]:
    """Every float column of ``table`` as text, a mean and its ``_lo``/``_hi`` alike."""
    floats = [c for c in table if table[c].dtype.kind == "f"]
    groups = {c.removesuffix("_lo").removesuffix("_hi") for c in floats}
    texts = {}
    for base in groups:
        members = [c for c in (base, f"{base}_lo", f"{base}_hi") if c in floats]
        values = table[members].to_numpy(float)
        digits = _digits_apart(values)
        for i, column in enumerate(members):
            texts[column] = [format_number(v, digits) for v in values[:, i]]
    return texts


def _digits_apart(values, least: int = 3, most: int = 10) -> int:
    """The fewest significant digits (``least`` to ``most``) at which the values of each row that
    differ are written differently."""
    for digits in range(least, most + 1):
        if all(_apart(row, digits) for row in values):
            return digits
    return most


def _apart(row, digits: int) -> bool:
    finite = [v for v in row if math.isfinite(v)]
    texts = {format_number(v, digits) for v in finite}
    return len(texts) == len(set(finite))


def format_number(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, in positional notation from 0.001 to 10⁷
    (11500, not 1.15e+04), without trailing zeros; integers as integers."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e7:
        return str(int(value))
    if not 1e-3 <= abs(value) < 1e7:
        return f"{value:.{digits}g}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
