"""The public entry points (``sealbox.__all__``) given None, a number or bytes where a path or a store
goes raise a Sealbox error with one line saying what to give, not a TypeError / AttributeError from
inside (``open_store(None)``: "expected str, bytes or os.PathLike object")."""

from __future__ import annotations

import pytest

import sealbox


@pytest.mark.parametrize("bad", [None, 5, b"/tmp/store"])
@pytest.mark.parametrize("entry", ["open_store", "init_store"])
def test_a_store_path_that_is_not_one(entry, bad):
    with pytest.raises(sealbox.ConfigError) as exc:
        getattr(sealbox, entry)(bad)
    assert str(exc.value) == f"store path: {bad!r} is not a folder path: give a str or a pathlib.Path (the store's folder)"


def test_a_postgres_url_that_is_not_a_string(tmp_path):
    with pytest.raises(sealbox.ConfigError, match=r"^postgres_url: 5 is not a string \(postgresql://USER@HOST/DATABASE\)$"):
        sealbox.init_store(tmp_path / "s", postgres_url=5)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("bad", [None, 5, "/some/folder"])
def test_verify_store_of_something_not_a_store(bad):
    with pytest.raises(sealbox.ConfigError) as exc:
        sealbox.verify_store(bad)
    assert str(exc.value) == f"store must be an open Sealbox store (sealbox.open_store(path)), got {bad!r}"


def test_a_recorder_on_a_number():
    with pytest.raises(sealbox.ConfigError, match=r"^store must be an open Sealbox store .*, got 5$"):
        sealbox.Recorder(5, policy=sealbox.policies.ALLOW_ALL)


@pytest.mark.parametrize("bad", [None, 5])
def test_policy_load_of_something_not_a_path(bad):
    with pytest.raises(sealbox.PolicyLoadError) as exc:
        sealbox.Policy.load(bad)
    assert str(exc.value) == f"{bad!r}: not a file path: give a str or a pathlib.Path"


def test_good_paths_still_work(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    store.close()
    store = sealbox.open_store(str(tmp_path / "s"))
    try:
        assert sealbox.verify_store(store).ok
    finally:
        store.close()
