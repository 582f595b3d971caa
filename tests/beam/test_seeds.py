"""The seed cannot be guessed from a release nor reused on other data (docs/privacy.md, the seed
invariants): the registry knows a file input by its content, no release carries anything a guessed
seed could be checked against, and seed files must hold 256 bits of key material."""
from __future__ import annotations

import base64
import json
import os

import numpy as np
import pytest

import pipelines.dp_stream_cluster as job_mod
from dpstream import DPStreamClusterer
from dpstream.noise import SECRET_SEED, TEST_SEED
from pipelines.seed_registry import SeedReused, check_and_record, content_id, run_identity
from transforms.cluster import load_seed


# --------------------------------------------------------------------------- the registry sees content

def _identity(tmp_path, path, *extra):
    job, _ = job_mod.parse_args([f"--input={path}", f"--output={tmp_path}/o", "--dim=2", "--radius=5",
                                 "--tick_size=50", "--horizon_ticks=4", *extra])
    return run_identity(job, job_mod.engine_config(job))


def test_an_in_place_edit_keeping_size_and_mtime_is_another_input(tmp_path):
    path = tmp_path / "d.npy"
    X = np.random.default_rng(1).normal(size=(120, 2))
    np.save(path, X)
    reg = str(tmp_path / "reg.jsonl")
    check_and_record("fp", _identity(tmp_path, path), False, reg)
    check_and_record("fp", _identity(tmp_path, path), False, reg)  # the same run again: accepted
    st = os.stat(path)
    X[17, 1] += 1.0  # one value changes, nothing else: the size stays
    np.save(path, X)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # as cp -p, rsync -t or touch -r leave it
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    with pytest.raises(SeedReused):
        check_and_record("fp", _identity(tmp_path, path), False, reg)


def test_a_seed_recorded_by_another_algorithm_version_is_refused(tmp_path, monkeypatch):
    """A version that releases something else for the same configuration and input is another run: a
    seed recorded by the earlier version would give the difference of the two releases exactly."""
    import dpstream.algorithm_version as version

    path = tmp_path / "d.npy"
    np.save(path, np.random.default_rng(1).normal(size=(120, 2)))
    reg = str(tmp_path / "reg.jsonl")
    check_and_record("fp", _identity(tmp_path, path), False, reg)
    check_and_record("fp", _identity(tmp_path, path), False, reg)  # the same code again: accepted
    monkeypatch.setattr(version, "ALGORITHM_VERSION", version.ALGORITHM_VERSION + 1)
    with pytest.raises(SeedReused):
        check_and_record("fp", _identity(tmp_path, path), False, reg)


def test_the_parsing_options_are_part_of_the_identity(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("x,y\n1,2\n3,4\n")
    reg = str(tmp_path / "reg.jsonl")
    check_and_record("fp", _identity(tmp_path, path), False, reg)
    with pytest.raises(SeedReused):
        check_and_record("fp", _identity(tmp_path, path, "--csv_header"), False, reg)


@pytest.mark.parametrize("first,second", [
    (["--columns=a,b"], ["--columns=a,c"]),
    (["--columns=a,b"], ["--columns=b,a"]),
    (["--columns=0,1"], ["--columns=0,2"]),
    ([], ["--delimiter=;"]),
])
def test_the_reading_options_are_part_of_the_identity(tmp_path, first, second):
    """Other columns (or another split of the same lines) of one file are other data: one seed on both
    would release their difference exactly."""
    path = tmp_path / "d.csv"
    path.write_text("a,b,c\n1,2,3\n4,5,6\n")
    reg = str(tmp_path / "reg.jsonl")
    check_and_record("fp", _identity(tmp_path, path, *first), False, reg)
    check_and_record("fp", _identity(tmp_path, path, *first), False, reg)  # the same run again
    with pytest.raises(SeedReused):
        check_and_record("fp", _identity(tmp_path, path, *second), False, reg)


def test_content_id_hashes_local_bytes_and_reads_the_stored_checksum_on_cloud_storage(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"\x00" * 3_000_000)
    b.write_bytes(b"\x00" * 2_999_999 + b"\x01")  # differs past the first streamed chunk
    assert content_id(str(a)) != content_id(str(b)) and content_id(str(a)).startswith("sha256:")
    from apache_beam.io.filesystems import FileSystems
    seen = []
    monkeypatch.setattr(FileSystems, "checksum", staticmethod(lambda p: seen.append(p) or "AAAAAA=="))
    monkeypatch.setattr(FileSystems, "open", staticmethod(lambda *a, **k: pytest.fail("downloaded the object")))
    assert content_id("gs://bucket/d.npy") == "gcs-crc32c:AAAAAA==" and seen == ["gs://bucket/d.npy"]


# --------------------------------------------------------------------------- seed files: 256 bits

# fixed values (not os.urandom): parallel test workers must collect the same test ids
@pytest.mark.parametrize("content", [bytes(range(7, 23)).hex(), base64.b64encode(bytes(range(90, 114))).decode(),
                                     "correct horse battery", "0123456789abcdef0123456789abcdef"])
def test_a_seed_file_with_less_than_32_bytes_of_key_material_is_refused_saying_how_to_make_one(tmp_path, content):
    path = tmp_path / "seed"
    path.write_text(content + "\n")
    with pytest.raises(ValueError, match=r"head -c 32 /dev/urandom > "):
        load_seed(str(path))


def test_raw_hex_and_base64_seed_files_of_32_bytes_are_accepted(tmp_path):
    raw = os.urandom(31) + b"\n"  # raw bytes are never stripped: a final newline byte is key material
    for i, content in enumerate([raw, raw.hex().encode() + b"\n", base64.b64encode(raw) + b"\n"]):
        path = tmp_path / f"seed{i}"
        path.write_bytes(content)
        assert len(load_seed(str(path))) >= 32
    hexfile = tmp_path / "seed1"
    assert load_seed(str(hexfile)) == raw.hex().encode()  # the text is the seed, as before


@pytest.mark.parametrize("content", [b"correct horse battery staple, and then some more words\n",
                                     b"a" * 40 + b"\n", (b"ab" * 32).hex().encode() + b"\n",
                                     base64.b64encode(b"\x00\x01" * 20) + b"\n"])
def test_a_passphrase_or_a_pattern_is_not_key_material(tmp_path, content):
    """Released values are functions of the seed (the snap path releases cell centers of the seed's
    shifted grids), so a guessable seed of any length could be confirmed from the releases."""
    path = tmp_path / "seed"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"passphrase|pattern"):
        load_seed(str(path))
    with pytest.raises(ValueError, match="random key material"):
        DPStreamClusterer(2, radius=5.0, random_state=content).fit(np.zeros((10, 2)))


def test_a_short_bytes_random_state_is_refused():
    with pytest.raises(ValueError, match="32 bytes"):
        DPStreamClusterer(2, radius=5.0, random_state=os.urandom(16)).fit(np.zeros((10, 2)))


# --------------------------------------------------------------------------- nothing to check a guess against

def _fit(random_state, X):
    return DPStreamClusterer(2, epsilon=1.0, radius=6.0, random_state=random_state, tick_size=200,
                             grid_levels=3, n_rings=6, block_size=100).fit(X)


def _leaves(d, prefix=()):
    """Every scalar of a release with its path; a list is one value (a whole array)."""
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, prefix + (k,))
    else:
        yield prefix, json.dumps(d)


def test_releases_of_one_integer_seed_on_other_data_sets_share_no_seed_derived_value():
    """A value that changes with the seed and stays the same on every data set depends on the seed
    alone: a guess at the seed could be checked against it. (Three data sets, so that a DP output
    such as the epoch index meeting by chance on two is not taken for one.)"""
    rng = np.random.default_rng(3)
    X1 = np.r_[rng.normal(size=(500, 2)) + 2, rng.normal(size=(500, 2)) - 2]
    others = [rng.normal(size=(300, 2)) * 2.5, rng.uniform(-5, 5, size=(2600, 2))]
    a, other = (dict(_leaves(_fit(s, X1).release_.to_dict())) for s in (42, 43))
    seed_derived = [p for p in a if a[p] != other[p]]  # the data held fixed, the seed changed
    assert seed_derived, "the two seeds gave identical releases"
    for X in others:
        b = dict(_leaves(_fit(42, X).release_.to_dict()))
        seed_derived = [p for p in seed_derived if a[p] == b.get(p)]
    assert not seed_derived, f"a value that depends on the seed alone is released: {seed_derived}"


def test_an_integer_seed_says_test_seed_not_private_and_a_secret_seed_says_secret():
    X = np.random.default_rng(5).normal(size=(400, 2))
    test, secret, fresh = _fit(42, X), _fit(os.urandom(32), X), _fit(None, X)
    assert test.release_.to_dict()["privacy"]["seed"] == TEST_SEED
    assert "test seed: not private" in TEST_SEED and "test seed: not private" in test.privacy_plan_.table()
    for m in (secret, fresh):
        assert m.release_.to_dict()["privacy"]["seed"] == SECRET_SEED
        assert "not private" not in m.privacy_plan_.table()
