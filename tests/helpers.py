"""Helpers shared by several test modules (test modules import from here, never from each other).

* ``cli_fails``: a command line refused with one stderr line;
* ``record_figures``: every matplotlib figure saved while it is active, by file name, so that a
  test can read a figure back (titles, labels, lines, legends) instead of its file size;
* ``execute_notebook``: a notebook under ``notebooks/`` run in a fresh kernel at small sizes.
"""

from __future__ import annotations

import ast
import contextlib
import io
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
# The notebook tests/test_notebooks_later.py executes, the longest (COCS's five programs), in a
# file of its own so that the other worker meanwhile runs tests/test_notebooks.py's six. Those
# run one after another (each in a fresh kernel) in one worker, where 01_rbcsf, at the sizes of
# 00_quick_start, loads some of its programs from the compilation cache.
NOTEBOOKS_LATER = ("03_cocs",)
CELL_TIMEOUT_S = 600


# --------------------------------------------------------------------------- command lines


_COMPILED = {"count": 0, "listening": False}


def _count_compilation(event: str, duration: float, **_) -> None:
    if event in (
        "/jax/core/compile/backend_compile_duration",
        "/jax/compilation_cache/compile_time_saved_sec",
    ):
        _COMPILED["count"] += 1


@contextlib.contextmanager
def no_compilation():
    """Assert that nothing is compiled by XLA inside the block (JAX's compile-time events)."""
    from jax import monitoring

    if not _COMPILED["listening"]:
        monitoring.register_event_duration_secs_listener(_count_compilation)
        _COMPILED["listening"] = True
    before = _COMPILED["count"]
    yield
    assert _COMPILED["count"] == before, "an XLA program was compiled"


def cli_fails(config_type, argv, capsys, tmp_path=None, prog="prog") -> str:
    """Run ``jfl.cli.main`` expecting exit 2 with exactly one stderr line (``<prog>: error: …``)
    and nothing on stdout; with ``tmp_path``, ``--out tmp_path/out`` is added and must not be
    created. Returns the line."""
    from jfl import cli

    if tmp_path is not None:
        argv = [*argv, "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exc, no_compilation():
        cli.main(config_type, argv, prog=prog)
    captured = capsys.readouterr()
    assert exc.value.code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"{prog}: error: ")
    assert captured.out == ""
    if tmp_path is not None:
        assert not (tmp_path / "out").exists()
    return lines[0]


# --------------------------------------------------------------------------- figures


@contextlib.contextmanager
def record_figures() -> Iterator[dict]:
    """``{file name: Figure}`` of every ``Figure.savefig`` call while active (the file is still
    written). jfl.plots draws on ``matplotlib.figure.Figure`` objects, so this sees every figure
    an experiment writes, whichever function drew it."""
    from matplotlib.figure import Figure

    saved: dict = {}
    savefig = Figure.savefig

    def recording(self, fname, *args, **kwargs):
        saved[Path(fname).name] = self
        return savefig(self, fname, *args, **kwargs)

    Figure.savefig = recording
    try:
        yield saved
    finally:
        Figure.savefig = savefig


def axes_summary(figure) -> list[dict]:
    """What a reader sees on each axes of ``figure`` that has a title or labels (colorbars
    left out): title, axis labels, the number of lines drawn and the legend's texts."""
    out = []
    for ax in figure.axes:
        if ax.get_label() == "<colorbar>":
            continue
        legend = ax.get_legend()
        out.append(
            {
                "title": ax.get_title(),
                "xlabel": ax.get_xlabel(),
                "ylabel": ax.get_ylabel(),
                "lines": len(ax.get_lines()),
                "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
                "images": len(ax.get_images()),
            }
        )
    return out


def read_back_png(path, figure, dpi=120) -> None:
    """The file at ``path`` is a PNG of ``figure``'s size at ``dpi`` (read back as pixels), with
    something drawn on it (not a blank page)."""
    import matplotlib.image

    image = matplotlib.image.imread(path)
    width, height = figure.get_size_inches() * dpi
    assert image.shape[:2] == (round(height), round(width)), (path, image.shape, width, height)
    assert image[..., :3].std() > 0.05, path


def check_figure(
    figure, title=None, xlabel=None, ylabel=None, lines=None, legend=None, policies=None
) -> dict:
    """The figure's single (non-colorbar) axes has the given title and axis labels, at least
    ``lines`` lines, the ``legend`` texts (in order) and legend texts that start with the
    ``policies`` (in order), where given; returns its ``axes_summary``."""
    (ax,) = axes_summary(figure)
    for key, want in (("title", title), ("xlabel", xlabel), ("ylabel", ylabel)):
        if want is not None:
            assert ax[key] == want, (key, ax)
    if lines is not None:
        assert ax["lines"] >= lines, ax
    if legend is not None:
        assert ax["legend"] == list(legend), ax
    if policies is not None:
        assert [text.split()[0] for text in ax["legend"]] == list(policies), ax
    return ax


def check_saved_figures(folder: Path, figures: Mapping, expected: Mapping[str, Mapping]) -> None:
    """Every figure named in ``expected`` ({file stem: ``check_figure`` arguments, or
    ``{"panels": [titles]}`` for a figure of several axes}) was saved under ``folder`` (read
    back) and shows what it is given; no other figure was written there."""
    written = sorted(p.stem for p in Path(folder).glob("*.png"))
    assert written == sorted(expected), written
    for name, want in expected.items():
        figure = figures[f"{name}.png"]
        read_back_png(Path(folder) / f"{name}.png", figure)
        if "panels" in want:  # several axes: their titles
            assert [ax["title"] for ax in axes_summary(figure)] == want["panels"], name
        else:
            check_figure(figure, **want)


# --------------------------------------------------------------------------- notebooks


def assigned_names(source: str) -> set[str]:
    """Names a cell's top-level statements assign (``A = …``, ``A, B = …``)."""
    names = set()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    names.add(name.id)
    return names


def with_sizes(notebook, sizes: Mapping[str, str]):
    """``notebook`` with a cell that sets ``sizes`` ({name: Python expression}) inserted right
    after the code cell that defines them all (its settings cell), so every later cell reads the
    small values; the notebook's own defaults, for users, stay as they are."""
    import nbformat

    if not sizes:
        return notebook
    settings = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and set(sizes) <= assigned_names(cell.source)
    ]
    assert settings, f"no cell of the notebook defines all of {sorted(sizes)}"
    index = settings[0]
    source = "\n".join(f"{name} = {value}" for name, value in sizes.items())
    notebook.cells.insert(index + 1, nbformat.v4.new_code_cell("# test sizes\n" + source))
    return notebook


def execute_notebook(path: Path, workdir: Path, sizes: Mapping[str, str] | None = None, end=""):
    """Run every cell of the notebook at ``path`` in a fresh kernel whose working directory is
    ``workdir``, with ``sizes`` (see ``with_sizes``) and the code ``end`` as a last cell; returns
    the executed notebook (raises CellExecutionError naming the cell on any error)."""
    import nbformat
    from nbclient import NotebookClient

    notebook = with_sizes(nbformat.read(path, as_version=4), sizes or {})
    if end:
        notebook.cells.append(nbformat.v4.new_code_cell(end))
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()
    return notebook


def printed(notebook) -> str:
    """Everything the executed notebook's cells printed (stdout streams), in order."""
    return "".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == "stdout"
    )


# Small sizes under test ({notebook: {name: expression}}), set right after the notebook's
# settings cell. The notebooks are compile-bound (one program per policy), so these mostly cut
# the rounds they then run, 03_cocs's branch and bound above all.
NOTEBOOK_SIZES = {
    "00_quick_start": {"SEEDS": "4", "ROUNDS": "60", "CLI_SEEDS": "2"},
    "01_rbcsf": {"SEEDS": "4", "ROUNDS": "60"},
    "02_cs_ucb": {"ROUNDS": "500", "MC_SAMPLES": "2000", "BETAS": "[1e-5, 0.01, 0.1]"},
    "03_cocs": {"SEEDS": "2", "ROUNDS": "30", "H_T": "[1.0, 2.0, 5.0]"},
    "04_federated_training": {"SEEDS": "2", "ROUNDS": "20"},
    "05_custom_policy": {"SEEDS": "4", "ROUNDS": "60", "CHECK_ROUNDS": "40"},
    "06_compare_selection_methods": {"SEEDS": "2", "ROUNDS": "20", "DRAWS": "5000"},
}

# The datasets and summary tables each notebook shows ({notebook: {dataset: (summary, metrics)}}),
# written by a last cell under test so that the test can recompute the summaries with the library.
NOTEBOOK_RESULTS = {
    "00_quick_start": {"ds": ("summary", None)},
    "01_rbcsf": {"ds": ("summary", None)},
    "02_cs_ucb": {"ds_ideal": ("summary_ideal", "regret"), "ds_q": ("summary_q", "regret")},
    "03_cocs": {"ds": ("summary", "utility")},
    "04_federated_training": {"ds": ("summary", None)},
    "05_custom_policy": {"ds": ("summary", None)},
    "06_compare_selection_methods": {"ds": ("summary", "selection")},
}
RESULTS_DIR = "test_results"


def results_cell(name: str) -> str:
    """The last cell: every dataset of ``NOTEBOOK_RESULTS[name]`` as netCDF and its summary as
    CSV under ``RESULTS_DIR`` (03_cocs: also its table of paired differences)."""
    lines = [
        "import pathlib as _pathlib",
        "from jfl import results as _results",
        f"_out = _pathlib.Path({RESULTS_DIR!r})",
        "_out.mkdir(exist_ok=True)",
    ]
    for dataset, (summary, _) in NOTEBOOK_RESULTS[name].items():
        lines.append(f"_results.write_dataset({dataset}, _out / '{dataset}.nc')")
        lines.append(f"{summary}.to_csv(_out / '{dataset}.csv', index=False)")
    if name == "03_cocs":
        lines.append("pd.DataFrame(rows).to_csv(_out / 'differences.csv', index=False)")
    return "\n".join(lines)


def check_notebook_results(name: str, notebook, workdir: Path) -> None:
    """What the notebook shows is the library's computation on its runs, at the test sizes.

    Every summary table it shows equals ``jfl.results.summarize`` (with the experiment's own
    metrics) of the dataset it shows, written to netCDF and read back; the datasets have the
    test's numbers of seeds and rounds; and per notebook a value it prints or writes is checked
    against the library: 00 the command-line sweep's summary (reduced on the device) against the
    Python runs' first seeds, 03 the paired differences against ``jfl.stats.mean_ci``, 04 the
    number of samples per client against the dataset's size.
    """
    import numpy as np
    import pandas as pd

    from jfl import results, stats
    from jfl.experiments import FlSelection, cocs, cs_ucb

    metrics = {None: None, "regret": cs_ucb.regret_metrics, "utility": cocs.utility_metrics}
    metrics["selection"] = FlSelection().metrics  # FlSelection's final_test_loss
    bounds = {"selection": FlSelection.metric_bounds}
    sizes = NOTEBOOK_SIZES[name]
    folder = workdir / RESULTS_DIR
    loaded = {}
    for dataset, (_, kind) in NOTEBOOK_RESULTS[name].items():
        ds = loaded[dataset] = results.load_dataset(folder / f"{dataset}.nc")
        if "SEEDS" in sizes:
            assert ds.sizes["seed"] == int(sizes["SEEDS"]), dict(ds.sizes)
        if "ROUNDS" in sizes:
            assert ds.sizes["round"] == int(sizes["ROUNDS"]), dict(ds.sizes)
        shown = pd.read_csv(folder / f"{dataset}.csv")
        ours = results.summarize(ds, metrics=metrics[kind], bounds=bounds.get(kind))
        assert len(shown) == ds.sizes["config"]
        pd.testing.assert_frame_equal(shown, pd.read_csv(io.StringIO(ours.to_csv(index=False))))

    text = printed(notebook)
    if name == "00_quick_start":
        ds, cli_seeds = loaded["ds"], int(sizes["CLI_SEEDS"])
        cli = pd.read_csv(workdir / "runs" / "00_quick_start" / "cli" / "summary.csv")
        first = results.summarize(ds.isel(config=slice(0, len(cli)), seed=slice(0, cli_seeds)))
        assert list(cli["policy"]) == list(first["policy"]) and (cli["n_seeds"] == cli_seeds).all()
        for column in ("mean_round_time", "mean_round_time_lo", "min_selection_rate", "jain_index"):
            np.testing.assert_allclose(cli[column], first[column], rtol=1e-5, err_msg=column)
        assert "reproduces the Python runs bit for bit" in text
    if name == "03_cocs":
        ds = loaded["ds"]
        table = pd.read_csv(folder / "differences.csv")
        assert len(table) == 6
        policy, h_t = ds["policy"].to_numpy(), ds["h_T"].to_numpy()

        def paper_row(p):  # the notebook's row of each policy: COCS at the paper's h_T = 5
            return int(np.flatnonzero((policy == p) & ((p != "cocs") | (h_t == 5.0)))[0])

        total = {
            p: ds["utility"].isel(config=paper_row(p)).sum("round").to_numpy()
            for p in ("oracle", "cocs", "linucb", "cucb", "random_budget")
        }
        names = {"Oracle": "oracle", "COCS": "cocs", "LinUCB": "linucb", "CUCB": "cucb"}
        names["Random"] = "random_budget"
        for row in table.itertuples():
            a, b = (names[s.strip()[2:-1]] for s in row.difference.split("−"))
            mean, lo, hi = stats.mean_ci(total[a] - total[b])
            np.testing.assert_allclose([row.mean, row.lo, row.hi], [mean, lo, hi], rtol=1e-9)
            assert row.resolved == bool(lo > 0 or hi < 0)
    if name == "04_federated_training":
        from jfl.fl import load_dataset

        size = min(500, len(load_dataset("digits").y_train) // 40)
        assert f"\n{size} samples per client\n" in f"\n{text}", text[:500]


def run_notebook_and_check(path: Path, workdir: Path) -> None:
    """Execute the notebook at ``path`` at its test sizes in ``workdir`` and check what it
    shows (``check_notebook_results``)."""
    notebook = execute_notebook(path, workdir, NOTEBOOK_SIZES[path.stem], results_cell(path.stem))
    check_notebook_results(path.stem, notebook, workdir)


def assert_same_configurations(small, large, keys: Sequence[str]) -> None:
    """Every configuration of the results ``small`` has, bit for bit, the same per-run values in
    ``large`` (a sweep composed differently), rows matched by the label columns ``keys``."""

    def label(value):
        return "nan" if isinstance(value, float) and value != value else value

    def labels(ds):
        columns = [ds[k].to_numpy().tolist() for k in keys]
        return [tuple(label(c[i]) for c in columns) for i in range(ds.sizes["config"])]

    where = {label: i for i, label in enumerate(labels(large))}
    rows = [where[label] for label in labels(small)]
    assert len(set(rows)) == len(rows) < large.sizes["config"]
    compared = 0
    for name, variable in small.data_vars.items():
        if "config" not in variable.dims:
            continue
        other = large[name].isel(config=rows).transpose(*variable.dims)
        np.testing.assert_array_equal(variable.to_numpy(), other.to_numpy(), err_msg=name)
        compared += 1
    assert compared >= 5, compared


# --------------------------------------------------------------------------- Hugging Face files

# The Hub repositories' Parquet file names (jfl.fl.hub.HUB_DATASETS), one file per split.
HUB_LAYOUT = {
    "mnist": "mnist/{split}-00000-of-00001.parquet",
    "fashion_mnist": "fashion_mnist/{split}-00000-of-00001.parquet",
    "cifar10": "plain_text/{split}-00000-of-00001.parquet",
    "femnist": "data/{split}-00000-of-00001.parquet",
}


def write_hub_parquet(directory: Path, name: str, sizes: Mapping[str, int], seed: int = 0) -> dict:
    """Tiny Parquet files of dataset ``name`` as its Hugging Face repository holds them (the same
    columns and features: PNG images, class labels, FEMNIST's writer names), one per split of
    ``sizes``; returns each split's arrays (images u8[n, H, W, C], labels, writer names)."""
    import datasets

    from jfl.fl.hub import HUB_DATASETS

    spec = HUB_DATASETS[name]
    shape = (32, 32, 3) if name == "cifar10" else (28, 28)
    rng = np.random.default_rng(seed)
    written = {}
    for split, n in sizes.items():
        images = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        labels = rng.integers(0, spec.num_classes, n)
        columns = {spec.image: list(images), spec.label: labels.tolist()}
        features = {
            spec.image: datasets.Image(),
            spec.label: datasets.ClassLabel(num_classes=spec.num_classes),
        }
        writers = None
        if spec.group:
            writers = np.array([f"f{k:04d}_{k % 100:02d}" for k in rng.integers(0, 7, n)])
            columns[spec.group] = writers.tolist()
            features[spec.group] = datasets.Value("string")
        table = datasets.Dataset.from_dict(columns, features=datasets.Features(features))
        path = directory / HUB_LAYOUT[name].format(split=split)
        path.parent.mkdir(parents=True, exist_ok=True)
        table.to_parquet(str(path))
        written[split] = (images.reshape(n, *shape[:2], -1), labels, writers)
    return written


def write_hub_cache(cache: Path, name: str, sizes: Mapping[str, int], seed: int = 0) -> dict:
    """``write_hub_parquet`` into a Hugging Face cache's snapshot of ``name``'s repository (the
    layout ``huggingface_hub`` leaves: refs/main naming the snapshot's commit)."""
    from jfl.fl.hub import HUB_DATASETS

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("datasets--" + HUB_DATASETS[name].repo.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return write_hub_parquet(repo / "snapshots" / commit, name, sizes, seed)
