"""Image-classification datasets for the federated-training experiments, loaded on the host.

``digits`` (the default) is real data shipped inside scikit-learn, so every test and example
runs offline with no setup. MNIST, Fashion-MNIST, CIFAR-10 and FEMNIST come from the Hugging Face
Hub through ``datasets`` (the optional extra ``jfl[hf]``; ``jfl.fl.hub``): from the user's
Hugging Face cache, or from ``data_dir`` holding the repository's Parquet files, downloaded only
when asked (``download=True``). MNIST, Fashion-MNIST and CIFAR-10 are also read from files the
user already has, in their standard distribution formats, when ``data_dir`` holds them:

* MNIST / Fashion-MNIST: the four IDX files from the dataset's website, plain or gzipped
  (``train-images-idx3-ubyte[.gz]`` …), directly in ``data_dir`` or in the layout torchvision
  leaves behind (``data_dir/MNIST/raw``, ``data_dir/FashionMNIST/raw``); Debian's
  ``dataset-fashion-mnist`` package puts them in ``/usr/share/datasets/fashion-mnist``;
* CIFAR-10: the six pickle batches of the "CIFAR-10 python version" archive
  (``cifar-10-python.tar.gz``), in ``data_dir/cifar-10-batches-py`` or directly in ``data_dir``.

A run should fail at once with a message that says what to put where, not deep inside training:
every problem (unknown name, missing directory or file, dataset not in the cache, bad magic
number, truncated file, broken gzip, pickle or Parquet, wrong shape, label out of range,
image/label count mismatch) raises ``DatasetError`` (a ``ValueError``) naming the file and what
is wrong with it.

All loaders return the same ``Dataset``: NumPy arrays, images NHWC and labels int32. Images of
the image datasets stay uint8 (0–255) until the training step scales them to [0, 1]
(``jfl.fl.train.pixels``), a quarter of float32's memory; digits' are float32 in [0, 1] already
(its 0–16 levels scaled by 1/16). FEMNIST also gives each sample's writer (``groups_train``,
``groups_test``), the clients of the ``natural`` partition. Partitioning the data among clients
and moving it to the device happen elsewhere.
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jfl.fl.hub import HUB_DATASETS, DatasetError, read_hub_dataset

DATASETS = ("digits", "mnist", "fashion_mnist", "cifar10", "femnist")
# The datasets read from the user's files in their original formats (IDX, CIFAR pickles).
FILE_DATASETS = ("mnist", "fashion_mnist", "cifar10")

NUM_CLASSES = 10  # digits, MNIST, Fashion-MNIST and CIFAR-10 have ten classes
# LEAF's per-writer train fraction (data/utils/split_data.py, --frac default 0.9).
TRAIN_FRACTION = 0.9

MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
CIFAR10_FILES = (
    "data_batch_1",
    "data_batch_2",
    "data_batch_3",
    "data_batch_4",
    "data_batch_5",
    "test_batch",
)

# Sub-directories searched after ``data_dir`` itself (torchvision's download layout).
_TORCHVISION_DIRS = {"mnist": "MNIST/raw", "fashion_mnist": "FashionMNIST/raw"}
_WEBSITES = {
    "mnist": "the MNIST website (yann.lecun.com/exdb/mnist)",
    "fashion_mnist": "the Fashion-MNIST repository (github.com/zalandoresearch/fashion-mnist)",
}

# IDX type byte -> element type (big-endian on disk).
_IDX_TYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_IMAGES_MAGIC = 0x00000803  # uint8, 3 dimensions (n, rows, cols)
_IDX_LABELS_MAGIC = 0x00000801  # uint8, 1 dimension (n,)

_CIFAR_PIXELS = 32 * 32 * 3


class Dataset(NamedTuple):
    name: str  # one of DATASETS
    x_train: np.ndarray  # u8[n, H, W, C] pixel values 0–255, or f32 in [0, 1] (digits)
    y_train: np.ndarray  # i32[n]  in [0, num_classes)
    x_test: np.ndarray  # u8 or f32[n_test, H, W, C]
    y_test: np.ndarray  # i32[n_test]
    num_classes: int
    groups_train: np.ndarray | None = None  # i32[n]  each sample's writer (FEMNIST), else None
    groups_test: np.ndarray | None = None  # i32[n_test]
    source: str = ""  # where the data were read: a directory, or a Hub snapshot with its commit


def load_dataset(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    download: bool = False,
    split_seed: int | np.random.SeedSequence = 0,
    cache_dir: str | os.PathLike | None = None,
) -> Dataset:
    """The dataset ``name`` (one of ``DATASETS``); ``data_dir`` is ignored for ``digits``.

    MNIST, Fashion-MNIST and CIFAR-10 are read from their original files when ``data_dir`` holds
    them, otherwise from Parquet files: those in ``data_dir``, or the Hugging Face cache
    (``cache_dir``, default the user's), which ``download`` fills first. FEMNIST is Parquet
    only; its writers' samples are split into train and test by ``split_seed``
    (``split_by_group``).
    """
    if name == "digits":
        return load_digits()
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if name in FILE_DATASETS and data_dir is not None and not _has_parquet(data_dir):
        files = {"mnist": load_mnist, "fashion_mnist": load_fashion_mnist, "cifar10": load_cifar10}
        return files[name](data_dir)
    arrays = read_hub_dataset(name, data_dir, download=download, cache_dir=cache_dir)
    x, y, groups = arrays.splits["train"]
    num_classes = HUB_DATASETS[name].num_classes
    if "test" in arrays.splits:
        x_test, y_test, groups_test = arrays.splits["test"]
    else:  # one split of writers' samples (FEMNIST): LEAF's per-writer split
        train, test = split_by_group(groups, np.random.default_rng(split_seed))
        x, x_test, y, y_test = x[train], x[test], y[train], y[test]
        groups, groups_test = groups[train], groups[test]
    return Dataset(name, x, y, x_test, y_test, num_classes, groups, groups_test, arrays.source)


def split_by_group(
    groups, rng: np.random.Generator, train_fraction: float = TRAIN_FRACTION
) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) sample indices, each group's samples split LEAF's way.

    LEAF ``data/utils/split_data.py`` ("splitting data by sample"): a user with fewer than two
    samples is dropped ("if curr_num_samples >= 2"); otherwise ``max(1, int(frac · n))`` of its
    ``n`` samples, drawn without replacement, train ("ensures number of train and test samples
    both >= 1") and the rest test. Groups are taken in increasing id; each draws its training
    samples as the first of ``rng.permutation(n)`` over its samples in index order. Both index
    arrays are sorted.
    """
    groups = np.asarray(groups)
    if groups.ndim != 1 or not np.issubdtype(groups.dtype, np.integer):
        raise ValueError(f"groups must be a 1-D integer array, got {groups.dtype} {groups.shape}")
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction!r}")
    order = np.argsort(groups, kind="stable")
    _, starts, sizes = np.unique(groups[order], return_index=True, return_counts=True)
    train, test = [], []
    for start, size in zip(starts, sizes, strict=True):
        if size < 2:
            continue
        members = order[start : start + size]  # this group's samples, in index order
        keep = max(1, int(train_fraction * size))
        drawn = rng.permutation(size)
        train.append(members[drawn[:keep]])
        test.append(members[drawn[keep:]])
    empty = np.zeros(0, np.int64)
    train = np.sort(np.concatenate(train)) if train else empty
    test = np.sort(np.concatenate(test)) if test else empty
    return train, test


def sample_groups(dataset: Dataset, count: int, rng: np.random.Generator, name="count") -> Dataset:
    """``dataset`` restricted to ``count`` of its training groups (FEMNIST's writers), drawn
    uniformly without replacement by ``rng.choice(ids, count, replace=False)`` over the sorted
    group ids: the chosen groups' training and test samples, in their order, with the groups
    renumbered 0… in increasing original id. LEAF samples its users before splitting them
    (``--sf``; docs/decisions.md#femnist-variant); ``name`` names ``count`` in errors."""
    if dataset.groups_train is None:
        raise ValueError(f"{name}: dataset {dataset.name!r} has no writers (groups) to sample")
    ids = np.unique(dataset.groups_train)
    if not isinstance(count, int | np.integer) or not 1 <= count <= ids.size:
        raise ValueError(
            f"{name} must be an integer in [1, {ids.size}] (the writers of {dataset.name}), "
            f"got {count!r}"
        )
    chosen = np.sort(rng.choice(ids, int(count), replace=False))
    train = np.isin(dataset.groups_train, chosen)
    test = np.isin(dataset.groups_test, chosen)
    return dataset._replace(
        x_train=dataset.x_train[train],
        y_train=dataset.y_train[train],
        x_test=dataset.x_test[test],
        y_test=dataset.y_test[test],
        groups_train=np.searchsorted(chosen, dataset.groups_train[train]).astype(np.int32),
        groups_test=np.searchsorted(chosen, dataset.groups_test[test]).astype(np.int32),
    )


def _has_parquet(data_dir) -> bool:
    root = Path(data_dir).expanduser()
    return root.is_dir() and any(p.is_file() for p in root.rglob("*.parquet"))


def load_digits() -> Dataset:
    """scikit-learn's 8×8 handwritten digits (1797 images), shipped with the package: no files.

    Pixel values 0–16 are scaled by 1/16. The split is a fixed stratified 80/20 one
    (``random_state=0``): 1437 training and 360 test images, every class in both.
    """
    # Imported here: scikit-learn is slow to import and only this loader needs it.
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    digits = sklearn_digits()
    x = (digits.images[..., None] / 16.0).astype(np.float32)  # f32[1797, 8, 8, 1]
    y = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=0
    )
    return Dataset("digits", x_train, y_train, x_test, y_test, NUM_CLASSES, source="scikit-learn")


def load_mnist(data_dir: str | os.PathLike | None) -> Dataset:
    """MNIST from the four IDX files ``MNIST_FILES`` (each plain or ``.gz``).

    Read from ``data_dir``, or from ``data_dir/MNIST/raw`` (torchvision's layout) when they are
    not directly there. 60000 training and 10000 test images, u8[n, 28, 28, 1].
    """
    return _load_idx_dataset("mnist", data_dir)


def load_fashion_mnist(data_dir: str | os.PathLike | None) -> Dataset:
    """Fashion-MNIST from the four IDX files ``MNIST_FILES`` (each plain or ``.gz``).

    The files have the same names and format as MNIST's. Read from ``data_dir``, or from
    ``data_dir/FashionMNIST/raw`` (torchvision's layout) when they are not directly there.
    60000 training and 10000 test images, u8[n, 28, 28, 1].
    """
    return _load_idx_dataset("fashion_mnist", data_dir)


def load_cifar10(data_dir: str | os.PathLike | None) -> Dataset:
    """CIFAR-10 from the pickle batches ``CIFAR10_FILES`` of the "CIFAR-10 python version".

    Read from ``data_dir/cifar-10-batches-py`` (where extracting ``cifar-10-python.tar.gz`` in
    ``data_dir`` puts them) or directly from ``data_dir``. 50000 training and 10000 test images,
    u8[n, 32, 32, 3] (NHWC; the files store each image channel-major).
    """
    directory = _find_files(
        "cifar10",
        data_dir,
        CIFAR10_FILES,
        subdirs=("cifar-10-batches-py", "."),
        plain_or_gz=False,
        source=(
            'They come from the "CIFAR-10 python version" archive cifar-10-python.tar.gz; '
            "extract it in the data directory (it unpacks into cifar-10-batches-py/)."
        ),
    )
    batches = [_read_cifar_batch(directory / name) for name in CIFAR10_FILES]
    x_train = np.concatenate([x for x, _ in batches[:-1]])
    y_train = np.concatenate([y for _, y in batches[:-1]])
    x_test, y_test = batches[-1]
    return Dataset("cifar10", x_train, y_train, x_test, y_test, NUM_CLASSES, source=str(directory))


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in one IDX file (gzipped if its name ends in ``.gz``).

    The header is two zero bytes, a type byte (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64), a byte with the number of dimensions, then one big-endian int32
    size per dimension; the data follow, big-endian, in row-major order. The file must hold
    exactly the number of bytes the header announces. The result is in native byte order.
    """
    return _read_idx(Path(path))[1]


# --- IDX (MNIST, Fashion-MNIST) -------------------------------------------------------------


def _load_idx_dataset(name: str, data_dir) -> Dataset:
    directory = _find_files(
        name,
        data_dir,
        MNIST_FILES,
        subdirs=(".", _TORCHVISION_DIRS[name]),
        plain_or_gz=True,
        source=f"These are the standard IDX files from {_WEBSITES[name]}.",
    )
    paths = [_plain_or_gz(directory / file) for file in MNIST_FILES]
    x_train, y_train = _read_idx_pair(paths[0], paths[1])
    x_test, y_test = _read_idx_pair(paths[2], paths[3])
    return Dataset(name, x_train, y_train, x_test, y_test, NUM_CLASSES, source=str(directory))


def _read_idx_pair(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    images = _read_idx_expecting(images_path, _IDX_IMAGES_MAGIC, "uint8 images, 3 dimensions")
    if images.shape[1:] != (28, 28):
        raise DatasetError(f"{images_path}: expected 28×28 images, got {images.shape[1:]}")
    labels = _read_idx_expecting(labels_path, _IDX_LABELS_MAGIC, "uint8 labels, 1 dimension")
    if len(images) != len(labels):
        raise DatasetError(
            f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels"
        )
    _check_labels(labels_path, labels)
    return images[..., None], labels.astype(np.int32)


def _read_idx_expecting(path: Path, magic: int, what: str) -> np.ndarray:
    found, array = _read_idx(path)
    if found != magic:
        raise DatasetError(
            f"{path}: bad IDX magic number 0x{found:08X}, expected 0x{magic:08X} ({what})"
        )
    return array


def _read_idx(path: Path) -> tuple[int, np.ndarray]:
    """(magic number, array) of one IDX file."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            data = path.read_bytes()
    except FileNotFoundError as e:
        raise DatasetError(f"{path}: no such file") from e
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
        what = "corrupt gzip file" if path.suffix == ".gz" else "cannot read the file"
        raise DatasetError(f"{path}: {what} ({type(e).__name__}: {e})") from e
    if len(data) < 4:
        raise DatasetError(f"{path}: truncated IDX file ({len(data)} bytes, no complete header)")
    magic = int.from_bytes(data[:4], "big")
    zeros, type_byte, ndim = data[:2], data[2], data[3]
    if zeros != b"\0\0" or type_byte not in _IDX_TYPES or ndim == 0:
        raise DatasetError(
            f"{path}: bad IDX magic number 0x{magic:08X} (expected 0x0000TTDD: two zero bytes, "
            f"a type byte TT in {{{', '.join(f'0x{t:02X}' for t in _IDX_TYPES)}}} and the "
            f"number of dimensions DD >= 1)"
        )
    header_len = 4 + 4 * ndim
    if len(data) < header_len:
        raise DatasetError(
            f"{path}: truncated IDX header ({len(data)} bytes, {ndim} dimensions need {header_len})"
        )
    shape = struct.unpack(f">{ndim}i", data[4:header_len])
    if min(shape) < 0:
        raise DatasetError(f"{path}: negative size in the IDX header {shape}")
    dtype = _IDX_TYPES[type_byte]
    expected = header_len + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        problem = "truncated" if len(data) < expected else "trailing bytes"
        raise DatasetError(
            f"{path}: {problem}: the header announces shape {shape} of {dtype.name} "
            f"({expected} bytes in all), the file has {len(data)} bytes"
        )
    array = np.frombuffer(data, dtype, offset=header_len).reshape(shape)
    return magic, array.astype(dtype.newbyteorder("="))  # a writable, native-endian copy


def _plain_or_gz(path: Path) -> Path:
    """``path`` if it exists, else ``path.gz``."""
    return path if path.is_file() else path.with_name(path.name + ".gz")


# --- CIFAR-10 ---------------------------------------------------------------------------------


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(u8[n, 32, 32, 3], i32[n]) of one pickle batch."""
    # The standard format is a Python pickle, and unpickling can run arbitrary code: only load
    # files you trust (e.g. the archive from the CIFAR-10 website).
    try:
        with path.open("rb") as f:
            batch = pickle.load(f, encoding="bytes")
    except FileNotFoundError as e:
        raise DatasetError(f"{path}: no such file") from e
    except Exception as e:  # unpickling a corrupt file can fail in many ways
        raise DatasetError(f"{path}: not a readable pickle ({type(e).__name__}: {e})") from e
    if not isinstance(batch, dict):
        raise DatasetError(f"{path}: expected a pickled dict, got {type(batch).__name__}")
    data = _cifar_entry(path, batch, "data")
    labels = _cifar_entry(path, batch, "labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
        kind = f"{data.dtype} array" if isinstance(data, np.ndarray) else type(data).__name__
        raise DatasetError(f"{path}: 'data' must be a uint8 array, got {kind}")
    if data.ndim != 2 or data.shape[1] != _CIFAR_PIXELS:
        raise DatasetError(
            f"{path}: 'data' must have shape (n, {_CIFAR_PIXELS}) (n images of 3×32×32), "
            f"got {data.shape}"
        )
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise DatasetError(
            f"{path}: 'labels' must be a list of integers, got {labels.dtype} of shape "
            f"{labels.shape}"
        )
    if len(labels) != len(data):
        raise DatasetError(f"{path}: {len(data)} images but {len(labels)} labels")
    _check_labels(path, labels)
    # Each row is channel-major (1024 R, then G, then B; each row-major 32×32): NCHW -> NHWC.
    x = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return x, labels.astype(np.int32)


def _cifar_entry(path: Path, batch: dict, key: str):
    for k in (key.encode(), key):
        if k in batch:
            return batch[k]
    raise DatasetError(f"{path}: no {key!r} entry (keys: {sorted(map(repr, batch))})")


# --- shared -----------------------------------------------------------------------------------


def _check_labels(path: Path, labels: np.ndarray) -> None:
    if labels.size and not (labels.min() >= 0 and labels.max() < NUM_CLASSES):
        raise DatasetError(
            f"{path}: labels must be in [0, {NUM_CLASSES}), got values in "
            f"[{labels.min()}, {labels.max()}]"
        )


def _find_files(name, data_dir, files, *, subdirs, plain_or_gz, source) -> Path:
    """The first of ``data_dir/subdir`` holding all ``files``; DatasetError if there is none."""
    suffix = "[.gz]" if plain_or_gz else ""
    listing = ", ".join(f + suffix for f in files)
    if plain_or_gz:
        listing += " (each plain or gzipped)"
    if data_dir is None:
        raise DatasetError(
            f"dataset {name!r} needs a data directory (data_dir, --data-dir on the command line) "
            f"holding {listing}. {source}"
        )
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise DatasetError(f"data directory {root} for dataset {name!r} does not exist")

    def exists(path: Path) -> bool:
        return path.is_file() or (plain_or_gz and path.with_name(path.name + ".gz").is_file())

    candidates = [root / s if s != "." else root for s in subdirs]
    missing = {d: [f for f in files if not exists(d / f)] for d in candidates}
    for directory in candidates:
        if not missing[directory]:
            return directory
    # Report the directory closest to complete (the first one searched on ties).
    directory = min(candidates, key=lambda d: len(missing[d]))
    absent = ", ".join(f + suffix for f in missing[directory])
    others = ", ".join(str(d) for d in candidates if d != directory)
    also = f" (also searched {others})" if others else ""
    raise DatasetError(
        f"dataset {name!r}: missing {absent} in {directory}{also}. "
        f"Expected files: {listing} (or the Parquet files of its Hugging Face copy). {source}"
    )
