"""Dataset loaders: round trips through tiny files in the real formats, and every error path.

The IDX and CIFAR-10 files are written here, byte for byte in the standard formats, into
``tmp_path``; nothing is downloaded. ``digits`` is the real data shipped with scikit-learn.
"""

from __future__ import annotations

import gzip
import pickle
import re
import struct

import numpy as np
import pytest

from jfl.fl.data import (
    CIFAR10_FILES,
    DATASETS,
    MNIST_FILES,
    Dataset,
    DatasetError,
    load_cifar10,
    load_dataset,
    load_digits,
    load_fashion_mnist,
    load_mnist,
    read_idx,
)

N_TRAIN, N_TEST = 5, 3  # IDX images
N_BATCH = 4  # CIFAR images per batch

# --- writers ----------------------------------------------------------------------------------


def idx_bytes(array: np.ndarray, type_byte: int = 0x08) -> bytes:
    header = bytes([0, 0, type_byte, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.tobytes()


def write_bytes(path, data: bytes, gz: bool):
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def write_mnist(directory, gz: bool = False, seed: int = 0) -> dict[str, np.ndarray]:
    """The four IDX files in ``directory``; returns the arrays written, keyed by file name."""
    rng = np.random.default_rng(seed)
    arrays = {
        MNIST_FILES[0]: rng.integers(0, 256, (N_TRAIN, 28, 28), dtype=np.uint8),
        MNIST_FILES[1]: rng.integers(0, 10, N_TRAIN, dtype=np.uint8),
        MNIST_FILES[2]: rng.integers(0, 256, (N_TEST, 28, 28), dtype=np.uint8),
        MNIST_FILES[3]: rng.integers(0, 10, N_TEST, dtype=np.uint8),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        write_bytes(directory / name, idx_bytes(array), gz)
    return arrays


def cifar_batch(rng, n: int = N_BATCH) -> dict:
    return {
        b"batch_label": b"testing batch",
        b"labels": [int(v) for v in rng.integers(0, 10, n)],
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [b"x.png"] * n,
    }


def write_cifar(directory, seed: int = 0, str_keys: bool = False) -> dict[str, dict]:
    """The six pickle batches in ``directory``; returns them, keyed by file name."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    batches = {}
    for name in CIFAR10_FILES:
        batch = cifar_batch(rng)
        if str_keys:
            batch = {k.decode(): v for k, v in batch.items()}
        (directory / name).write_bytes(pickle.dumps(batch, protocol=2))
        batches[name] = batch
    return batches


def check_mnist(ds: Dataset, arrays: dict, name: str = "mnist"):
    assert ds.name == name and ds.num_classes == 10
    # Pixels stay uint8 (0–255): the training step scales them (jfl.fl.train.pixels).
    assert ds.x_train.shape == (N_TRAIN, 28, 28, 1) and ds.x_train.dtype == np.uint8
    assert ds.x_test.shape == (N_TEST, 28, 28, 1) and ds.x_test.dtype == np.uint8
    assert ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
    np.testing.assert_array_equal(ds.x_train[..., 0], arrays[MNIST_FILES[0]])
    np.testing.assert_array_equal(ds.y_train, arrays[MNIST_FILES[1]])
    np.testing.assert_array_equal(ds.x_test[..., 0], arrays[MNIST_FILES[2]])
    np.testing.assert_array_equal(ds.y_test, arrays[MNIST_FILES[3]])


# --- IDX round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_mnist_round_trip(tmp_path, gz):
    arrays = write_mnist(tmp_path, gz=gz)
    check_mnist(load_mnist(tmp_path), arrays)


def test_mnist_mixed_plain_and_gz(tmp_path):
    arrays = write_mnist(tmp_path, gz=True)
    (tmp_path / (MNIST_FILES[1] + ".gz")).unlink()
    write_bytes(tmp_path / MNIST_FILES[1], idx_bytes(arrays[MNIST_FILES[1]]), gz=False)
    check_mnist(load_mnist(tmp_path), arrays)


def test_plain_file_preferred_over_gz(tmp_path):
    arrays = write_mnist(tmp_path, gz=False)
    # A broken .gz next to the plain file is never opened.
    (tmp_path / (MNIST_FILES[0] + ".gz")).write_bytes(b"not gzip")
    check_mnist(load_mnist(tmp_path), arrays)


def test_torchvision_layouts(tmp_path):
    mnist = write_mnist(tmp_path / "MNIST" / "raw", gz=True, seed=1)
    fashion = write_mnist(tmp_path / "FashionMNIST" / "raw", gz=False, seed=2)
    check_mnist(load_mnist(tmp_path), mnist)
    check_mnist(load_fashion_mnist(tmp_path), fashion, name="fashion_mnist")


def test_flat_layout_preferred_over_torchvision(tmp_path):
    flat = write_mnist(tmp_path, seed=1)
    write_mnist(tmp_path / "MNIST" / "raw", seed=2)
    check_mnist(load_mnist(tmp_path), flat)


def test_read_idx_other_types(tmp_path):
    array = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    path = write_bytes(tmp_path / "a.idx", idx_bytes(array.astype(">i4"), 0x0C), gz=True)
    got = read_idx(path)
    np.testing.assert_array_equal(got, array)
    assert got.dtype == np.int32 and got.dtype.isnative and got.flags.writeable


# --- CIFAR-10 round trips ---------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["cifar-10-batches-py", "flat"])
def test_cifar10_round_trip(tmp_path, layout):
    directory = tmp_path / layout if layout != "flat" else tmp_path
    batches = write_cifar(directory)
    ds = load_cifar10(tmp_path)
    assert ds.name == "cifar10" and ds.num_classes == 10
    assert ds.x_train.shape == (5 * N_BATCH, 32, 32, 3) and ds.x_train.dtype == np.uint8
    assert ds.x_test.shape == (N_BATCH, 32, 32, 3)
    assert ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
    train = [batches[name] for name in CIFAR10_FILES[:5]]
    np.testing.assert_array_equal(ds.y_train, np.concatenate([b[b"labels"] for b in train]))
    np.testing.assert_array_equal(ds.y_test, batches["test_batch"][b"labels"])

    # One pixel by hand: image 1 of data_batch_2, row 5, column 7. Each row of ``data`` is
    # 1024 red values, then 1024 green, then 1024 blue, each plane row-major 32×32.
    row = batches["data_batch_2"][b"data"][1]
    offset = 5 * 32 + 7
    r, g, b = row[offset], row[1024 + offset], row[2048 + offset]
    pixel = ds.x_train[N_BATCH + 1, 5, 7]
    np.testing.assert_array_equal(pixel, np.array([r, g, b], np.uint8))

    # And every pixel: NCHW -> NHWC, unscaled.
    data = np.concatenate([b[b"data"] for b in train])
    np.testing.assert_array_equal(ds.x_train, data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def test_cifar10_str_keys(tmp_path):
    batches = write_cifar(tmp_path, str_keys=True)
    ds = load_cifar10(tmp_path)
    np.testing.assert_array_equal(ds.y_test, batches["test_batch"]["labels"])


# --- digits -----------------------------------------------------------------------------------


def test_digits():
    ds = load_digits()
    assert ds.name == "digits" and ds.num_classes == 10
    assert ds.x_train.shape == (1437, 8, 8, 1) and ds.x_test.shape == (360, 8, 8, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    assert ds.y_train.shape == (1437,) and ds.y_test.shape == (360,)
    for x in (ds.x_train, ds.x_test):
        assert x.min() == 0.0 and x.max() == 1.0
    for y in (ds.y_train, ds.y_test):
        np.testing.assert_array_equal(np.unique(y), np.arange(10))
    again = load_digits()
    for a, b in zip(ds[1:5], again[1:5], strict=True):
        np.testing.assert_array_equal(a, b)


# --- load_dataset -----------------------------------------------------------------------------


def test_load_dataset_dispatches(tmp_path):
    mnist = write_mnist(tmp_path / "mnist", seed=1)
    fashion = write_mnist(tmp_path / "fashion" / "FashionMNIST" / "raw", gz=True, seed=2)
    write_cifar(tmp_path / "cifar" / "cifar-10-batches-py")
    dirs = {
        "digits": tmp_path / "nowhere",  # ignored
        "mnist": tmp_path / "mnist",
        "fashion_mnist": tmp_path / "fashion",
        "cifar10": tmp_path / "cifar",
    }
    direct = {
        "digits": load_digits(),
        "mnist": load_mnist(dirs["mnist"]),
        "fashion_mnist": load_fashion_mnist(dirs["fashion_mnist"]),
        "cifar10": load_cifar10(dirs["cifar10"]),
    }
    assert set(dirs) == set(DATASETS) - {"femnist"}  # FEMNIST is Parquet only: test_hub.py
    for name in dirs:
        ds = load_dataset(name, str(dirs[name]))
        assert ds.name == name
        for a, b in zip(ds[1:5], direct[name][1:5], strict=True):
            np.testing.assert_array_equal(a, b)
    check_mnist(load_dataset("mnist", dirs["mnist"]), mnist)
    check_mnist(load_dataset("fashion_mnist", dirs["fashion_mnist"]), fashion, "fashion_mnist")
    assert load_dataset("digits").x_train.shape == (1437, 8, 8, 1)


# --- errors -----------------------------------------------------------------------------------


def test_unknown_name():
    with pytest.raises(
        DatasetError, match=r"'imagenet'.*digits, mnist, fashion_mnist, cifar10, femnist"
    ):
        load_dataset("imagenet")
    assert issubclass(DatasetError, ValueError)


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "cifar10"])
def test_data_dir_none(name):
    expected_file = "train-images-idx3-ubyte" if name != "cifar10" else "data_batch_1"
    loader = {"mnist": load_mnist, "fashion_mnist": load_fashion_mnist, "cifar10": load_cifar10}
    with pytest.raises(DatasetError, match=rf"{name}.*--data-dir.*{expected_file}"):
        loader[name](None)


def test_data_dir_does_not_exist(tmp_path):
    with pytest.raises(DatasetError, match=rf"{re.escape(str(tmp_path / 'x'))} .*does not exist"):
        load_mnist(tmp_path / "x")


def test_missing_idx_file(tmp_path):
    write_mnist(tmp_path, gz=True)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DatasetError) as info:
        load_mnist(tmp_path)
    message = str(info.value)
    assert f"missing t10k-labels-idx1-ubyte[.gz] in {tmp_path} " in message
    assert "train-images-idx3-ubyte" not in message.split("Expected files")[0]
    assert all(f in message.split("Expected files")[1] for f in MNIST_FILES)
    assert str(tmp_path / "MNIST" / "raw") in message  # the other place searched


def test_missing_cifar_file(tmp_path):
    write_cifar(tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    path = re.escape(str(tmp_path / "cifar-10-batches-py"))
    with pytest.raises(
        DatasetError, match=rf"missing data_batch_3 in {path} .*test_batch.*tar\.gz"
    ):
        load_cifar10(tmp_path)


def test_empty_directory_lists_everything(tmp_path):
    with pytest.raises(DatasetError, match=rf"missing {', '.join(CIFAR10_FILES)} in "):
        load_cifar10(tmp_path)


def corrupt_idx(tmp_path, name, data: bytes, gz: bool = False):
    """A valid MNIST directory whose file ``name`` holds ``data`` instead; returns its path."""
    write_mnist(tmp_path, gz=gz)
    return write_bytes(tmp_path / name, data, gz=gz)


def test_truncated_idx(tmp_path):
    images = np.zeros((N_TRAIN, 28, 28), np.uint8)
    path = corrupt_idx(tmp_path, MNIST_FILES[0], idx_bytes(images)[:-10], gz=True)
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: truncated"):
        load_mnist(tmp_path)


def test_truncated_idx_header(tmp_path):
    path = corrupt_idx(tmp_path, MNIST_FILES[1], b"\0\0\x08\x01\0\0")
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: truncated IDX header"):
        load_mnist(tmp_path)


def test_trailing_bytes(tmp_path):
    labels = np.zeros(N_TRAIN, np.uint8)
    path = corrupt_idx(tmp_path, MNIST_FILES[1], idx_bytes(labels) + b"\0")
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: trailing bytes"):
        load_mnist(tmp_path)


def test_wrong_magic(tmp_path):
    # Labels stored where the images belong: a valid IDX file with the wrong magic number.
    path = corrupt_idx(tmp_path, MNIST_FILES[2], idx_bytes(np.zeros(N_TEST, np.uint8)))
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: bad IDX magic .*0x00000803"):
        load_mnist(tmp_path)


def test_garbage_magic(tmp_path):
    path = corrupt_idx(tmp_path, MNIST_FILES[0], b"\x89PNG\r\n\x1a\n" * 4)
    with pytest.raises(
        DatasetError, match=rf"{re.escape(str(path))}: bad IDX magic number 0x89504E47"
    ):
        load_mnist(tmp_path)


def test_wrong_image_size(tmp_path):
    path = corrupt_idx(tmp_path, MNIST_FILES[0], idx_bytes(np.zeros((N_TRAIN, 32, 32), np.uint8)))
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: expected 28×28"):
        load_mnist(tmp_path)


def test_count_mismatch(tmp_path):
    path = corrupt_idx(tmp_path, MNIST_FILES[3], idx_bytes(np.zeros(N_TEST + 1, np.uint8)))
    images = re.escape(str(tmp_path / MNIST_FILES[2]))
    with pytest.raises(DatasetError, match=rf"{images} holds 3 images but {re.escape(str(path))}"):
        load_mnist(tmp_path)


def test_label_out_of_range(tmp_path):
    labels = np.array([0, 1, 10, 2, 3], np.uint8)
    path = corrupt_idx(tmp_path, MNIST_FILES[1], idx_bytes(labels), gz=True)
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: labels must be in \[0, 10\)"):
        load_mnist(tmp_path)


def test_corrupt_gzip(tmp_path):
    write_mnist(tmp_path, gz=True)
    path = tmp_path / (MNIST_FILES[0] + ".gz")
    path.write_bytes(path.read_bytes()[:40])  # cut inside the compressed stream
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: corrupt gzip"):
        load_mnist(tmp_path)
    path.write_bytes(b"this is not gzip at all")
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: corrupt gzip"):
        load_mnist(tmp_path)


def test_corrupt_pickle(tmp_path):
    write_cifar(tmp_path)
    path = tmp_path / "data_batch_4"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: not a readable pickle"):
        load_cifar10(tmp_path)


def test_pickle_not_a_dict(tmp_path):
    write_cifar(tmp_path)
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: expected a pickled dict"):
        load_cifar10(tmp_path)


@pytest.mark.parametrize(
    ("entry", "value", "message"),
    [
        (b"data", np.zeros((N_BATCH, 3, 32, 32), np.uint8), r"'data' must have shape \(n, 3072\)"),
        (b"data", np.zeros((N_BATCH, 1024), np.uint8), r"'data' must have shape \(n, 3072\)"),
        (b"data", np.zeros((N_BATCH, 3072), np.float32), r"'data' must be a uint8 array"),
        (b"labels", [0, 1, 2], r"4 images but 3 labels"),
        (b"labels", [0, 1, -1, 2], r"labels must be in \[0, 10\)"),
        (b"labels", [0.0, 1.0, 2.0, 3.0], r"'labels' must be a list of integers"),
        (b"data", None, r"no 'data' entry"),
    ],
)
def test_bad_cifar_batch(tmp_path, entry, value, message):
    write_cifar(tmp_path / "cifar-10-batches-py")
    path = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    batch = cifar_batch(np.random.default_rng(1))
    if value is None:
        del batch[entry]
    else:
        batch[entry] = value
    path.write_bytes(pickle.dumps(batch))
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: {message}"):
        load_cifar10(tmp_path)
