"""Datasets read from Hugging Face Parquet files (jfl.fl.hub): the user's cache or a directory,
offline, each problem one DatasetError line; FEMNIST split by writer as LEAF does it."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from jfl.fl.data import DatasetError, load_dataset, sample_groups, split_by_group
from tests.helpers import write_hub_cache, write_hub_parquet

pytest.importorskip("datasets")


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "cifar10"])
def test_reads_a_directory_of_parquet_files(tmp_path, name):
    written = write_hub_parquet(tmp_path, name, {"train": 7, "test": 3}, seed=1)
    ds = load_dataset(name, tmp_path)
    assert ds.name == name and ds.num_classes == 10 and ds.source == str(tmp_path)
    for x, y, (images, labels, _) in (
        (ds.x_train, ds.y_train, written["train"]),
        (ds.x_test, ds.y_test, written["test"]),
    ):
        assert x.dtype == np.uint8 and y.dtype == np.int32
        np.testing.assert_array_equal(x, images)  # PNG is lossless
        np.testing.assert_array_equal(y, labels)
    assert ds.groups_train is None


def test_reads_the_hugging_face_cache(tmp_path):
    written = write_hub_cache(tmp_path, "mnist", {"train": 5, "test": 2})
    ds = load_dataset("mnist", cache_dir=tmp_path)
    np.testing.assert_array_equal(ds.x_train, written["train"][0])
    np.testing.assert_array_equal(ds.y_test, written["test"][1])
    assert ds.source == "hf://datasets/ylecun/mnist@0123456789abcdef0123456789abcdef01234567"


def test_femnist_split_by_writer(tmp_path):
    written = write_hub_parquet(tmp_path, "femnist", {"train": 60}, seed=2)
    images, labels, writers = written["train"]
    ds = load_dataset("femnist", tmp_path, split_seed=5)
    assert ds.num_classes == 62
    names = np.unique(writers)
    groups = np.searchsorted(names, writers)
    train, test = split_by_group(groups, np.random.default_rng(5))
    np.testing.assert_array_equal(ds.x_train, images[train])
    np.testing.assert_array_equal(ds.y_test, labels[test])
    np.testing.assert_array_equal(ds.groups_train, groups[train])
    np.testing.assert_array_equal(ds.groups_test, groups[test])


def leaf_split(groups, seed, fraction=0.9):
    """LEAF's data/utils/split_data.py by sample, as a plain loop over the users."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for g in sorted(set(groups.tolist())):
        members = [i for i in range(len(groups)) if groups[i] == g]
        n = len(members)
        if n < 2:
            continue
        keep = max(1, int(fraction * n))
        drawn = rng.permutation(n)
        train += [members[j] for j in drawn[:keep]]
        test += [members[j] for j in drawn[keep:]]
    return sorted(train), sorted(test)


def test_split_by_group_matches_a_plain_loop():
    rng = np.random.default_rng(0)
    for seed in range(60):
        n = int(rng.integers(1, 80))
        groups = rng.integers(-3, int(rng.integers(1, 12)), n)
        train, test = split_by_group(groups, np.random.default_rng(seed))
        expected = leaf_split(groups, seed)
        assert train.tolist() == expected[0] and test.tolist() == expected[1]
        assert not set(train) & set(test)
        for g in np.unique(groups):  # both sides of every group of 2 or more
            size = int(np.sum(groups == g))
            assert np.sum(groups[train] == g) == (max(1, int(0.9 * size)) if size > 1 else 0)
    with pytest.raises(ValueError, match="groups must be a 1-D integer array"):
        split_by_group(np.zeros(3), np.random.default_rng(0))


def test_sample_groups_keeps_whole_writers(tmp_path):
    write_hub_parquet(tmp_path, "femnist", {"train": 80}, seed=3)
    ds = load_dataset("femnist", tmp_path)
    ids = np.unique(ds.groups_train)
    small = sample_groups(ds, 3, np.random.default_rng(4), "--writers")
    chosen = np.sort(np.random.default_rng(4).choice(ids, 3, replace=False))
    for x, groups, kept, new in (
        (ds.x_train, ds.groups_train, small.x_train, small.groups_train),
        (ds.x_test, ds.groups_test, small.x_test, small.groups_test),
    ):
        rows = [i for i in range(len(groups)) if groups[i] in chosen]
        assert new.tolist() == [chosen.tolist().index(groups[i]) for i in rows]
        np.testing.assert_array_equal(kept, x[rows])
    with pytest.raises(ValueError, match=r"--writers must be an integer in \[1, \d+\]"):
        sample_groups(ds, ids.size + 1, np.random.default_rng(0), "--writers")


def test_missing_dataset_names_the_fetch(tmp_path):
    with pytest.raises(DatasetError) as error:
        load_dataset("femnist", cache_dir=tmp_path / "empty")
    message = str(error.value)
    assert "\n" not in message and "not in the Hugging Face cache" in message
    assert "--download" in message and "hf download flwrlabs/femnist --repo-type dataset" in message


def test_broken_files_are_one_line(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train-00000-of-00001.parquet").write_bytes(b"not parquet")
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        load_dataset("femnist", tmp_path)
    write_hub_parquet(tmp_path / "m", "mnist", {"train": 3})  # no test split
    with pytest.raises(DatasetError, match="has no test split"):
        load_dataset("mnist", tmp_path / "m")
    write_hub_parquet(tmp_path / "c", "mnist", {"train": 3, "test": 2})
    (tmp_path / "c" / "mnist").rename(tmp_path / "c" / "plain_text")
    with pytest.raises(DatasetError, match=r"needs the columns \['img', 'label'\]"):
        load_dataset("cifar10", tmp_path / "c")


def test_without_the_extra(tmp_path, monkeypatch):
    import importlib

    real = importlib.import_module

    def missing(name, *args):
        if name in ("datasets", "huggingface_hub"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(DatasetError, match=r'not installed: pip install -e "\.\[hf\]"'):
        load_dataset("cifar10", cache_dir=tmp_path)


@pytest.mark.filterwarnings("ignore:A test tried to use socket")
def test_no_test_reaches_the_network():
    from pytest_socket import SocketConnectBlockedError

    with pytest.raises(SocketConnectBlockedError), socket.socket() as s:
        s.connect(("93.184.216.34", 443))
