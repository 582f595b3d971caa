"""What the raw points cost on their hops, and that it changes no release: messages with large arrays are framed
(transforms/stages.py: ``wire`` sends the arrays' data after the pickle, ``open_msg`` gives arrays that are views
of the received bytes; the values come back equal, read-only), RouteByEpoch joins consecutive rows of one message
without a copy (``joined``), and AssignRings widens and clips a group of ticks at a time (``tick_groups``); the job
with every message framed, and with groups of one or two ticks, releases what the engine releases."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                    exc_type=ImportError)

from pipelines import dp_stream_cluster as job_mod  # noqa: E402
from tests.beam.test_pipeline import _blobs, _engine_releases, _read_jsonl, _run_batch, seed_file  # noqa: E402,F401
from transforms import stages  # noqa: E402
from transforms.messages import RoutedTicks, ShardPoints, TickPoints  # noqa: E402


def _arrays():
    rng = np.random.default_rng(3)
    return [rng.normal(size=(3000, 7)), rng.normal(size=(500, 9)).astype(np.float32),
            np.asfortranarray(rng.normal(size=(40, 30))), rng.normal(size=(60, 60))[::2, 1:],  # F order, strided
            np.zeros((0, 384)), np.zeros((5, 0)), np.arange(9, dtype=np.int64), np.array(["a", "bcd"])]


def test_a_large_message_is_framed_and_comes_back_equal_as_read_only_views():
    arrays = _arrays()
    msg = stages.wire({"ticks": [(1, 2)], "arrays": arrays})
    assert msg[:4] == stages._FRAME  # its first array holds more than OUT_OF_BAND_BYTES
    back = stages.open_msg(msg)
    assert back["ticks"] == [(1, 2)]
    for a, b in zip(arrays, back["arrays"]):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    big = back["arrays"][0]
    assert not big.flags.writeable  # a view of the message: a stage copies what it changes
    assert np.shares_memory(big, np.frombuffer(msg, np.uint8))
    assert big.ctypes.data % 16 == 0  # the data start aligned in the frame
    with pytest.raises(ValueError):
        big[0, 0] = 1.0


def test_a_small_message_stays_one_plain_pickle():
    small = ShardPoints([(1, 3)], np.ones((3, 2)))
    msg = stages.wire(small)
    assert msg[:1] == b"\x80"
    assert stages.open_msg(msg).counts == small.counts
    assert np.array_equal(pickle.loads(msg).points, small.points)
    assert stages.open_msg((1, 2)) == (1, 2)  # not bytes (the start marker): as it is


def test_a_routed_message_is_framed_as_its_points_and_a_small_head():
    """The frame holds the points' bytes once (the pickle without them, a few lengths, alignment padding)."""
    x = np.random.default_rng(0).normal(size=(20000, 8)).astype(np.float32)
    routed = RoutedTicks([TickPoints(1, 12000, None), TickPoints(2, 8000, None)], x)
    msg = stages.wire(routed)
    assert len(msg) < x.nbytes + 4096
    back = stages.open_msg(msg)
    assert np.array_equal(back.points, x) and back.ticks == routed.ticks


def _job_and_engine(X, tmp_path, seed_file, radius, extra):
    np.save(tmp_path / "a.npy", X)
    out = tmp_path / "out"
    argv = [f"--input={tmp_path}/a.npy", f"--output={out}", f"--dim={X.shape[1]}", f"--radius={radius}", "--k=3",
            "--tick_size=200", "--horizon_ticks=8", f"--seed_file={seed_file}", "--epsilon=1", *extra]
    _run_batch(argv)
    got = sorted(_read_jsonl(out / "releases.jsonl"), key=lambda r: r["tick"])
    job, _ = job_mod.parse_args(argv)
    ticks = -(-len(X) // 200)
    return got, _engine_releases(job, seed_file, {t + 1: X[t * 200:(t + 1) * 200] for t in range(ticks)})


@pytest.mark.parametrize("timer, semicoreset", [("batch", "tree"), ("looping", "tree"), ("batch", "lloyd"), ("batch", "snap")])
def test_the_job_with_every_array_message_framed_releases_what_the_engine_releases(tmp_path, seed_file, timer,
                                                                                    semicoreset, monkeypatch):
    """Every message and RouteByEpoch state with an array framed (the threshold at 0 bytes; the other tests'
    small streams stay under it), float32 rows most of which AssignRings clips, in both timer modes; lloyd's
    partial sketches are raw points, read-only views in RingMergeReduce: the engine's releases, bit for bit."""
    monkeypatch.setattr(stages, "OUT_OF_BAND_BYTES", 0)
    framed = []
    orig = stages.frame
    monkeypatch.setattr(stages, "frame", lambda head, bufs: framed.append(1) or orig(head, bufs))
    X = _blobs(1400, np.random.default_rng(7)).astype(np.float32)
    got, want = _job_and_engine(X, tmp_path, seed_file, 6, [f"--tick_timer={timer}", f"--semicoreset={semicoreset}"])
    assert len(framed) > 20  # the job's messages went through the frame
    assert [r["tick"] for r in got] == list(range(1, 9))
    assert got == want


def test_joined_shows_consecutive_rows_of_one_array_without_a_copy_and_copies_anything_else():
    from transforms.cluster import joined
    from transforms.stages import row_blocks

    x = stages.open_msg(stages.wire(np.random.default_rng(1).normal(size=(5000, 6))))  # a framed message's array
    blocks = row_blocks(x, [1000, 0, 2500, 1500])
    got = joined(blocks[1:], 6)
    assert np.array_equal(got, x[1000:]) and np.shares_memory(got, x) and not got.flags.writeable
    assert np.array_equal(joined(blocks, 6), x) and np.shares_memory(joined(blocks, 6), x)
    apart = [blocks[0], blocks[3]]  # not consecutive: the rows between are not theirs
    assert np.array_equal(joined(apart, 6), np.concatenate(apart)) and not np.shares_memory(joined(apart, 6), x)
    other = [x[:10], x.copy()[10:20]]  # two arrays
    assert np.array_equal(joined(other, 6), x[:20]) and not np.shares_memory(joined(other, 6), x)
    backwards = [blocks[2], blocks[0]]
    assert np.array_equal(joined(backwards, 6), np.concatenate(backwards))
    assert joined([], 6).shape == (0, 6)
    f32 = np.zeros((10, 6), np.float32)
    assert joined([f32[:5], x[5:10]], 6).dtype == np.float64  # dtypes as concatenate gives them
    assert joined([f32[:0], x[:0], f32[:4]], 6).dtype == np.float64
    assert joined([x[:0], x[:3]], 6) is not None and joined([x[:0], x[:3]], 6).shape == (3, 6)


def test_tick_groups_cover_every_tick_once_in_order_within_the_bound():
    from transforms.epoch_stages import tick_groups

    assert tick_groups([5, 5, 5, 20, 0, 1], 10) == [(0, 2), (2, 3), (3, 4), (4, 6)]  # a larger tick alone
    assert tick_groups([3], 1) == [(0, 1)] and tick_groups([0, 0], 5) == [(0, 2)]
    sizes = list(np.random.default_rng(2).integers(0, 50, 200))
    groups = tick_groups(sizes, 120)
    assert [i for lo, hi in groups for i in range(lo, hi)] == list(range(200))
    assert all(sum(sizes[lo:hi]) <= 120 or hi - lo == 1 for lo, hi in groups)


@pytest.mark.parametrize("timer, semicoreset", [("batch", "tree"), ("looping", "tree"), ("batch", "lloyd"),
                                                ("batch", "snap")])
def test_the_job_with_assign_rings_in_small_groups_of_ticks_releases_what_the_engine_releases(
        tmp_path, seed_file, timer, semicoreset, monkeypatch):
    """Groups of at most 150 rows (one tick of a shard, about 100 rows, here; the other tests' streams fit in one group), most rows
    clipped: every tick's partials, the clipped count and the releases are those of one pass."""
    from transforms import epoch_stages

    monkeypatch.setattr(epoch_stages, "ASSIGN_GROUP_BYTES", 8 * 2 * 150)
    groups = []
    orig = epoch_stages.tick_groups
    monkeypatch.setattr(epoch_stages, "tick_groups", lambda sizes, rows: groups.append(orig(sizes, rows)) or groups[-1])
    X = _blobs(1400, np.random.default_rng(7)).astype(np.float32)
    got, want = _job_and_engine(X, tmp_path, seed_file, 6, [f"--tick_timer={timer}", f"--semicoreset={semicoreset}"])
    if timer == "batch":
        assert max(len(g) for g in groups) > 1  # a message's ticks went in several groups
    assert [r["tick"] for r in got] == list(range(1, 9))
    assert got == want


def test_batch_into_ticks_gathers_each_groups_rows_as_concatenating_and_indexing_would():
    """BatchIntoTicks' flush takes each (shard, tick) group's rows straight from the arrays it buffered:
    the same rows, order and dtype as concatenating them and indexing (float32 chunks stay float32; a
    float64 part widens all), empty arrays included."""
    from transforms.ticks import _RowGather

    rng = np.random.default_rng(3)
    for arrays in ([rng.normal(size=(n, 6)).astype(np.float32) for n in (5, 0, 9, 3, 1)],
                   [rng.normal(size=(4, 6))] + [rng.normal(size=(n, 6)).astype(np.float32) for n in (7, 2)]):
        whole = np.concatenate(arrays)
        for _ in range(50):
            rows = np.sort(rng.choice(whole.shape[0], size=int(rng.integers(1, whole.shape[0] + 1)), replace=False))
            got = _RowGather(arrays)(rows)
            assert got.dtype == whole.dtype and np.array_equal(got, whole[rows])
