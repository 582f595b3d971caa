"""The output-topic consumer (pipelines.consume_releases) against a local Pub/Sub: one Release per
tick, redelivered ticks dropped, messages as the job's sink writes them (pipelines.sinks.release_message)."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("google.cloud.pubsub_v1", reason="google-cloud-pubsub is not installed", exc_type=ImportError)

from dpstream import DPStreamClusterer  # noqa: E402
from pipelines.consume_releases import main as consume_main, pubsub_releases  # noqa: E402
from pipelines.local_pubsub import LocalPubSub  # noqa: E402
from pipelines.sinks import release_message  # noqa: E402


@pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")
def test_consumer_yields_each_tick_once_as_a_release(capsys):
    rng = np.random.default_rng(0)
    m = DPStreamClusterer(2, radius=10.0, random_state=0, horizon_ticks=3, grid_levels=3, n_rings=4,
                          block_size=50, tree_depth=3)
    rels = []
    for _ in range(3):
        m.partial_fit(rng.normal(size=(100, 2)))
        rels.append(json.loads(json.dumps(m.release_.to_dict())))
    with LocalPubSub() as ps:
        topic = ps.topic("releases")
        sub = ps.subscription(topic, "releases-sub")
        sub2 = ps.subscription(topic, "releases-cli")
        pub = ps.publisher()
        for d in rels + [rels[1]]:  # tick 2 delivered twice
            msg = release_message(d)
            pub.publish(topic, msg.data, **msg.attributes).result(timeout=30)
        got = list(pubsub_releases(sub, timeout=2.0, pull_seconds=1.0))
        assert consume_main(["--subscription", sub2, "--timeout", "2", "--max_releases", "3"]) == 0
    assert sorted(r.tick for r in got) == [1, 2, 3]
    assert sorted((r.to_dict() for r in got), key=lambda d: d["tick"]) == rels
    model = DPStreamClusterer.from_release(max(got, key=lambda r: r.tick))
    np.testing.assert_array_equal(model.cluster_centers_, m.cluster_centers_)
    out = capsys.readouterr().out
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("tick ")] == ["1", "2", "3"]
