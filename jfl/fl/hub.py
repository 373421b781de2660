"""Datasets from the Hugging Face Hub, read through ``datasets`` (the optional extra ``jfl[hf]``).

The Hub holds MNIST, Fashion-MNIST, CIFAR-10 and LEAF's FEMNIST as Parquet files
(``HUB_DATASETS`` names the repositories). They are read from the user's Hugging Face cache, or
from a directory holding the repository's Parquet files (``data_dir``, e.g. what
``hf download REPO --repo-type dataset --local-dir DIR`` leaves). Nothing is downloaded unless
the caller asks (``download=True``, ``--download`` on the command line): the cache is looked up
with ``local_files_only``, which never opens a connection, so a run is offline whatever
``HF_HUB_OFFLINE`` says. A dataset that is not there is one ``DatasetError`` line naming the
command that fetches it.

Images stay uint8 (the training step scales them to [0, 1]: a quarter of float32's memory);
labels are int32, and FEMNIST's writer of every sample is an int32 group id (its index in the
sorted writer names). The Hub's FEMNIST copy has a train split only: ``jfl.fl.data`` splits each
writer's samples into train and test LEAF's way.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import NamedTuple

import numpy as np


class DatasetError(ValueError):
    """An unknown dataset name, or a dataset file that is missing or corrupt."""


class HubDataset(NamedTuple):
    repo: str  # the dataset repository on the Hugging Face Hub
    image: str  # the column of the images
    label: str  # the column of the class labels
    num_classes: int
    group: str | None = None  # the column naming each sample's writer (FEMNIST)


HUB_DATASETS = {
    "mnist": HubDataset("ylecun/mnist", "image", "label", 10),
    "fashion_mnist": HubDataset("zalando-datasets/fashion_mnist", "image", "label", 10),
    "cifar10": HubDataset("uoft-cs/cifar10", "img", "label", 10),
    # LEAF's FEMNIST (Caldas et al. 2018): 62 classes (digits, upper- and lowercase letters),
    # 814,277 samples in one train split (the repository's card); docs/decisions.md#femnist-variant
    # compares it with LEAF's, TFF's and FedScale's variants.
    "femnist": HubDataset("flwrlabs/femnist", "image", "character", 62, group="writer_id"),
}

INSTALL = 'pip install -e ".[hf]"'


class HubArrays(NamedTuple):
    """One dataset's arrays, as the Parquet files hold them."""

    splits: dict  # split name -> (u8[n, H, W, C] images, i32[n] labels, i32[n] groups or None)
    source: str  # where they came from: the cache snapshot (with its commit) or the directory


def hub_error(name: str, problem: str):
    """The ``DatasetError`` of dataset ``name`` whose files are missing, naming the fixes."""
    repo = HUB_DATASETS[name].repo
    return DatasetError(
        f"dataset {name!r} {problem}; fetch it once with --download (or: hf download {repo} "
        f"--repo-type dataset), or give --data-dir a directory holding its Parquet files"
    )


def read_hub_dataset(
    name: str, data_dir=None, *, download: bool = False, cache_dir=None
) -> HubArrays:
    """The Parquet splits of ``name`` (a key of ``HUB_DATASETS``): from ``data_dir`` if given,
    else from the Hugging Face cache (``cache_dir``, default the user's), downloaded into it
    first only when ``download``."""
    if data_dir is not None:
        directory = Path(data_dir).expanduser()
        source = str(directory)
    else:
        directory = snapshot(name, download=download, cache_dir=cache_dir)
        source = f"hf://datasets/{HUB_DATASETS[name].repo}@{directory.name}"
    files = parquet_splits(name, directory)
    return HubArrays({split: _read_split(name, paths) for split, paths in files.items()}, source)


def snapshot(name: str, *, download: bool, cache_dir=None) -> Path:
    """The local snapshot directory of ``name``'s repository in the Hugging Face cache."""
    _import("huggingface_hub", name)
    from huggingface_hub import constants, errors, snapshot_download

    repo = HUB_DATASETS[name].repo
    try:
        path = snapshot_download(
            repo,
            repo_type="dataset",
            allow_patterns=["*.parquet", "*/*.parquet", "README.md"],
            cache_dir=cache_dir,
            local_files_only=not download,
        )
    except errors.LocalEntryNotFoundError:
        where = cache_dir or constants.HF_HUB_CACHE
        raise hub_error(name, f"is not in the Hugging Face cache {where}") from None
    except (errors.HfHubHTTPError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DatasetError(f"dataset {name!r}: could not download {repo}: {first}") from e
    return Path(path)


def parquet_splits(name: str, directory: Path) -> dict[str, list[Path]]:
    """The Parquet files of each split under ``directory``, by the Hub's file naming
    (``[data/]train-00000-of-00001.parquet``); FEMNIST has only a train split."""
    if not directory.is_dir():
        raise DatasetError(f"data directory {directory} for dataset {name!r} does not exist")
    files = sorted(p for p in directory.rglob("*.parquet") if p.is_file())
    splits = {
        split: [p for p in files if p.name.startswith(f"{split}-") or p.name == f"{split}.parquet"]
        for split in ("train", "test")
    }
    needed = ("train",) if HUB_DATASETS[name].group else ("train", "test")
    missing = [split for split in needed if not splits[split]]
    if missing:
        found = ", ".join(str(p.relative_to(directory)) for p in files[:4]) or "none"
        raise hub_error(
            name,
            f"has no {' or '.join(missing)} split in {directory} (Parquet files named "
            f"'SPLIT-*.parquet'; found: {found})",
        )
    return {split: paths for split, paths in splits.items() if paths}


def _read_split(name: str, paths: list[Path]):
    """(u8[n, H, W, C], i32[n], i32[n] or None) of one split's Parquet files."""
    datasets = _import("datasets", name)
    spec = HUB_DATASETS[name]
    quiet = not datasets.utils.are_progress_bars_disabled()
    if quiet:  # its per-split bars would interleave with the sweep's own
        datasets.disable_progress_bars()
    try:
        table = datasets.load_dataset("parquet", data_files=[str(p) for p in paths], split="train")
    except Exception as e:  # pyarrow and datasets raise many kinds on a broken file
        raise DatasetError(f"{paths[0]}: not a readable Parquet file ({type(e).__name__})") from e
    finally:
        if quiet:
            datasets.enable_progress_bars()
    columns = [spec.image, spec.label] + ([spec.group] if spec.group else [])
    absent = [c for c in columns if c not in table.column_names]
    if absent:
        raise DatasetError(
            f"{paths[0]}: dataset {name!r} needs the columns {columns}, missing {absent} "
            f"(found {table.column_names})"
        )
    if not isinstance(table.features[spec.image], datasets.Image):
        raise DatasetError(f"{paths[0]}: column {spec.image!r} does not hold images")
    images = np.asarray(table.with_format("numpy")[:][spec.image])
    if images.dtype != np.uint8 or images.ndim not in (3, 4):
        raise DatasetError(
            f"{paths[0]}: expected uint8 images of one size, got {images.dtype} {images.shape}"
        )
    if images.ndim == 3:
        images = images[..., None]
    labels = np.asarray(table[spec.label])
    if labels.size and not (labels.min() >= 0 and labels.max() < spec.num_classes):
        raise DatasetError(
            f"{paths[0]}: labels must be in [0, {spec.num_classes}), got values in "
            f"[{labels.min()}, {labels.max()}]"
        )
    groups = None
    if spec.group:
        _, groups = np.unique(np.asarray(table[spec.group]), return_inverse=True)
        groups = groups.astype(np.int32)
    return images, labels.astype(np.int32), groups


def _import(module: str, name: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DatasetError(
            f"dataset {name!r} is read through Hugging Face datasets, which is not installed: "
            f"{INSTALL}"
        ) from None
